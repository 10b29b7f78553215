"""The ceiling benchmark's servers answer correctly (no timing asserted: bench/ prints, never asserts)."""

import asyncio
import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import ROOT

BENCH = ROOT / "bench" / "loadgen_ceiling.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loadgen_ceiling", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["loadgen_ceiling"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("raw", [True, False])
def test_ceiling_servers_stream_32_chunks(raw: bool) -> None:
    if not raw and shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        pytest.skip("nginx not installed (apt-get install -y nginx)")
    lc = _module()
    with lc.server(raw) as (url, _desc):
        for client in (lc.ours, lc.plain_aiohttp):
            m = asyncio.run(client(url, 40.0, 0.25))
            assert m.n_requests == 10 and m.n_completed == 10 and m.n_failed == 0
            if client is lc.ours:
                assert m.total_output_tokens == 10 * lc.CHUNKS
                assert m.itl_chunk_ms.count == 10 * (lc.CHUNKS - 1)
