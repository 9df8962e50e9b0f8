"""The cache kept between runs (stallscope/disk_cache.py): what it keeps, what it will not trust, and the C library's
lock call sites read from it by a later run instead of being worked out again."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from stallscope import disk_cache
from stallscope.bpf import futex_collector


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    where = tmp_path / "cache"
    monkeypatch.setenv("STALLSCOPE_CACHE_DIR", str(where))
    return where


def test_entries_are_kept_by_key_the_newest_last_and_bounded(cache_dir, monkeypatch):
    monkeypatch.setattr(disk_cache, "MAX_ENTRIES", 3)
    for i in range(5):
        disk_cache.write("kind", f"k{i}", {"n": i})
    disk_cache.write("kind", "k3", {"n": 33})  # written again: the newest
    assert list(disk_cache.read("kind").items()) == [("k2", {"n": 2}), ("k4", {"n": 4}), ("k3", {"n": 33})]
    assert oct(os.stat(cache_dir).st_mode & 0o777) == "0o700"
    assert oct(os.stat(cache_dir / "kind.json").st_mode & 0o777) == "0o600"
    assert disk_cache.read("other") == {}


def test_a_file_kept_whole_is_read_back_only_where_no_other_user_could_have_written_it(cache_dir):
    disk_cache.write_bytes("compiled", b"\x00code")
    assert disk_cache.read_bytes("compiled") == b"\x00code"
    assert oct(os.stat(cache_dir / "compiled").st_mode & 0o777) == "0o600"
    assert disk_cache.read_bytes("other") is None
    os.chmod(cache_dir / "compiled", 0o660)
    assert disk_cache.read_bytes("compiled") is None
    os.chmod(cache_dir / "compiled", 0o600)
    os.chmod(cache_dir, 0o770)
    assert disk_cache.read_bytes("compiled") is None


def test_a_damaged_file_is_no_cache_and_is_written_anew(cache_dir):
    cache_dir.mkdir(mode=0o700)
    (cache_dir / "kind.json").write_text('{"k": [1, 2')
    assert disk_cache.read("kind") == {}
    disk_cache.write("kind", "k", [3])
    assert disk_cache.read("kind") == {"k": [3]}
    (cache_dir / "kind.json").write_text("[1, 2]")  # JSON, not an object of entries
    assert disk_cache.read("kind") == {}


def test_what_another_user_could_have_written_is_not_read_nor_written(cache_dir):
    disk_cache.write("kind", "k", 1)
    os.chmod(cache_dir / "kind.json", 0o620)  # its group may write it
    assert disk_cache.read("kind") == {}
    os.chmod(cache_dir / "kind.json", 0o600)
    os.chmod(cache_dir, 0o777)  # anyone may replace it
    assert disk_cache.read("kind") == {}
    disk_cache.write("kind", "k2", 2)
    os.chmod(cache_dir, 0o700)
    assert disk_cache.read("kind") == {"k": 1}  # nothing was written meanwhile
    if os.geteuid() == 0:  # root can give the file away
        os.chown(cache_dir / "kind.json", 65534, 65534)
        assert disk_cache.read("kind") == {}
    os.symlink(cache_dir / "kind.json", cache_dir / "link.json")
    assert disk_cache.read("link") == {}  # not followed


def test_an_empty_directory_setting_turns_it_off_and_an_unwritable_place_is_no_error(tmp_path, monkeypatch):
    monkeypatch.setenv("STALLSCOPE_CACHE_DIR", "")
    disk_cache.write("kind", "k", 1)
    assert disk_cache.read("kind") == {}
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("STALLSCOPE_CACHE_DIR", str(blocker / "cache"))  # under a file: cannot be made
    disk_cache.write("kind", "k", 1)
    assert disk_cache.read("kind") == {}


def test_a_later_run_reads_the_lock_call_sites_kept_and_a_changed_library_is_read_again(cache_dir, tmp_path,
                                                                                        monkeypatch):
    libc = futex_collector.libc_of(0)
    if libc is None or not shutil.which("objdump"):
        pytest.skip("no C library mapped here, or no objdump")
    copy = tmp_path / "libc.so.6"
    shutil.copy(libc, copy)
    monkeypatch.setattr(futex_collector, "libc_of", lambda pid: str(copy))
    monkeypatch.setattr(futex_collector, "_SITES", {})
    worked_out = []
    real = futex_collector._lock_call_sites
    monkeypatch.setattr(futex_collector, "_lock_call_sites", lambda path: worked_out.append(path) or real(path))

    first = futex_collector.lock_call_sites(0)
    assert first.sites and worked_out == [str(copy)]
    kept = json.loads((cache_dir / f"{futex_collector.SITES_CACHE}.json").read_text())
    assert len(kept) == 1
    futex_collector._SITES.clear()  # a later run: a new process
    assert futex_collector.lock_call_sites(0) == first and worked_out == [str(copy)]

    # its times set back as they were (as a file rewritten and given its old mtime): size and mtime alike, a new ctime
    st = os.stat(copy)
    time.sleep(0.05)  # past a coarse clock's tick
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(copy).st_ctime_ns != st.st_ctime_ns and os.stat(copy).st_mtime_ns == st.st_mtime_ns
    futex_collector._SITES.clear()
    assert futex_collector.lock_call_sites(0).sites == first.sites and worked_out == [str(copy), str(copy)]
