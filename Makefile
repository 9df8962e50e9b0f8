# stallscope build. `make install` is idempotent and quick when nothing changed.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed
DEB_PACKAGES := clang llvm libbpf-dev libbpf1 bpftool linux-perf gcc make python3-venv
# the report's lock fold and row reader read recordings through SQLite's C API (analyzer/rowfold.c, rowread.c)
DEB_PACKAGES += libsqlite3-dev
# the row reader is a CPython extension: the headers of Debian's interpreter (a pyenv one brings its own)
DEB_PACKAGES += python3-dev
# programs nobody here wrote, whose conclusions the tests check (tests/test_real_programs.py)
DEB_PACKAGES += stress-ng sysbench fio rt-tests
# the TUI's real-terminal test
DEB_PACKAGES += tmux
# the browser the HTML reports are tested in (tests/test_report_browser.py, through the DevTools protocol)
DEB_PACKAGES += chromium
CLANG ?= clang
BPF_ARCH := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
BPF_SRCS := $(wildcard bpf/*.bpf.c)
BPF_OBJS := $(BPF_SRCS:.c=.o)
BPF_HDRS := $(wildcard bpf/*.h)
# the interpreter's headers and extension suffix, for the C extension below (the venv is made from $(PYTHON))
PY_INCLUDE := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
PY_EXT_SUFFIX := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
ROWREAD := analyzer/_rowread$(PY_EXT_SUFFIX)
MODELFOLD := analyzer/_modelfold$(PY_EXT_SUFFIX)
SERIESFOLD := analyzer/_seriesfold$(PY_EXT_SUFFIX)
WAKEFOLD := analyzer/_wakefold$(PY_EXT_SUFFIX)
LOCKGROUPS := analyzer/_lockgroups$(PY_EXT_SUFFIX)
KALLSYMS := analyzer/_kallsyms$(PY_EXT_SUFFIX)
EXAMPLE_SRCS := $(wildcard examples/*.c)
EXAMPLE_BINS := $(patsubst examples/%.c,examples/bin/%,$(EXAMPLE_SRCS))
PYTEST_ARGS ?=
# the package's own modules compiled once: an editable install has no bytecode, and where the environment says
# not to write it (PYTHONDONTWRITEBYTECODE) every start compiled them anew (0.13 s of `stallscope top`'s start)
PY_PACKAGES := stallscope analyzer bpf tui reports
PY_SRCS := $(foreach d,$(PY_PACKAGES),$(wildcard $(d)/*.py))
BYTECODE := $(VENV)/.bytecode

.PHONY: install top test bench clean deb-packages

install: deb-packages $(STAMP) $(BYTECODE) bpf/vmlinux.h $(BPF_OBJS) bpf/libmapdiff.so bpf/liblogfilter.so analyzer/librowfold.so.1 $(ROWREAD) $(MODELFOLD) $(SERIESFOLD) $(WAKEFOLD) $(LOCKGROUPS) $(KALLSYMS) $(EXAMPLE_BINS)

# Installs only what is missing, so a second run costs one dpkg query.
deb-packages:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

$(STAMP): setup.cfg pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

$(BYTECODE): $(PY_SRCS) $(STAMP)
	$(VENV)/bin/python -m compileall -q $(PY_PACKAGES)
	touch $@

# CO-RE: the objects are compiled once against this kernel's BTF and relocate on others.
bpf/vmlinux.h:
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > $@.tmp && mv $@.tmp $@

bpf/%.bpf.o: bpf/%.bpf.c bpf/vmlinux.h $(BPF_HDRS)
	$(CLANG) -g -O2 -Wall -Werror -target bpf -mcpu=v3 -D__TARGET_ARCH_$(BPF_ARCH) -Ibpf -c $< -o $@.tmp && mv $@.tmp $@

# the drains' comparison of cumulative map entries (bpf/mapdiff.py loads it with ctypes)
bpf/libmapdiff.so: bpf/mapdiff.c
	$(CC) -O2 -g -Wall -Werror -shared -fPIC -o $@.tmp $< && mv $@.tmp $@

# libbpf's debug lines dropped before they reach Python (bpf/libbpf.py; it logs through Python without it)
bpf/liblogfilter.so: bpf/logfilter.c
	$(CC) -O2 -g -Wall -Werror -shared -fPIC -o $@.tmp $< && mv $@.tmp $@

# a recording's lock rows folded in C (analyzer/rowfold.py loads it with ctypes; Python folds without it)
analyzer/librowfold.so.1: analyzer/rowfold.c
	$(CC) -O2 -g -Wall -Werror -shared -fPIC -o $@.tmp $< -lsqlite3 && mv $@.tmp $@

# a recording's task and off-CPU rows read into records in C (analyzer/rowread.py; Python reads them without it)
$(ROWREAD): analyzer/rowread.c analyzer/slots.h
	$(CC) -O2 -g -Wall -Werror -shared -fPIC -I$(PY_INCLUDE) -o $@.tmp $< -lsqlite3 && mv $@.tmp $@

# a window's task and off-CPU records folded into its model in C (analyzer/model.py; Python folds them without it)
$(MODELFOLD): analyzer/modelfold.c analyzer/slots.h
	$(CC) -O2 -g -Wall -Werror -shared -fPIC -I$(PY_INCLUDE) -o $@.tmp $< && mv $@.tmp $@

# an interval's records summed into a report's series in C (analyzer/series.py; Python sums them without it)
$(SERIESFOLD): analyzer/seriesfold.c analyzer/slots.h
	$(CC) -O2 -g -Wall -Werror -shared -fPIC -I$(PY_INCLUDE) -o $@.tmp $< && mv $@.tmp $@

# a recording's wakeup rows folded in C in a thread (analyzer/wakefold.py; the model folds them without it)
$(WAKEFOLD): analyzer/wakefold.c
	$(CC) -O2 -g -Wall -Werror -shared -fPIC -I$(PY_INCLUDE) -o $@.tmp $< -lsqlite3 && mv $@.tmp $@

# a model's kernel lock records grouped into lock_stat rows in C (analyzer/locks.py; Python groups them without it)
$(LOCKGROUPS): analyzer/lockgroups.c analyzer/slots.h
	$(CC) -O2 -g -Wall -Werror -shared -fPIC -I$(PY_INCLUDE) -o $@.tmp $< && mv $@.tmp $@

# the kernel's symbols parsed in C (analyzer/symbols.py; Python parses them without it)
$(KALLSYMS): analyzer/kallsyms.c
	$(CC) -O2 -g -Wall -Werror -shared -fPIC -I$(PY_INCLUDE) -o $@.tmp $< && mv $@.tmp $@

examples/bin/%: examples/%.c examples/truth.h
	@mkdir -p examples/bin
	$(CC) -O2 -g -Wall -pthread -o $@ $< -lm

top: install
	$(VENV)/bin/stallscope top

test: install
	$(VENV)/bin/pytest $(PYTEST_ARGS)

# The peers the overhead benchmark compares with; not needed for anything else.
BENCH_DEB_PACKAGES := bpftrace

bench: install
	@dpkg-query -W -f='$${Status}\n' $(BENCH_DEB_PACKAGES) 2>/dev/null | grep -q '^install ok installed' || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(BENCH_DEB_PACKAGES) >/dev/null)
	$(VENV)/bin/python -m benchmarks.overhead

clean:
	rm -rf bpf/*.o bpf/*.so bpf/*.tmp bpf/vmlinux.h analyzer/*.so.1 analyzer/_rowread*.so analyzer/_modelfold*.so analyzer/_seriesfold*.so analyzer/_wakefold*.so analyzer/_lockgroups*.so analyzer/_kallsyms*.so analyzer/*.tmp examples/bin
