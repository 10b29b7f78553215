"""Candidates: one pool (a layout and its settings) or a prefill/decode pair (two pools, each its own
layout, settings and redundant experts, the transfer backend and the router), named as they read."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.candidate import Candidate, DisaggCandidate, Pool
from orchestrator.disagg import parse_disagg
from orchestrator.errors import SpecError
from orchestrator.layout import parse_layout
from tests.support.engines import fixed_settings

BASE = fixed_settings(8192)


def test_a_pair_reads_as_its_layout_and_counts_both_pools() -> None:
    pd = parse_disagg("p:tp2x2+d:tp4")
    c = DisaggCandidate.of(pd, BASE, BASE, "NixlConnector", bases=(BASE, BASE))
    assert c.name == str(c) == "p:tp2x2+d:tp4"
    assert c.gpus == 8 and c.layout == pd
    assert [p.role for p in c.pools] == ["prefill", "decode"]
    assert c.prefill.candidate == Candidate(parse_layout("tp2x2"), BASE)
    assert c.engine == BASE.engine and c.router_policy == "least_outstanding"


def test_a_pool_with_other_settings_says_so_in_its_part_of_the_name() -> None:
    pd = parse_disagg("p:tp4+d:tp4")
    big = replace(BASE, max_num_seqs=512)
    c = DisaggCandidate.of(pd, BASE, big, "NixlConnector", bases=(BASE, BASE))
    assert c.name == "p:tp4+d:tp4 max_num_seqs=512"
    assert c.decode.settings.max_num_seqs == 512 and c.prefill.settings.max_num_seqs == 256


def test_the_stored_split_holds_both_pools() -> None:
    c = DisaggCandidate.of(parse_disagg("p:tp4dp8ep+d:tp4dp80ep"), BASE, BASE, "mooncake",
                           redundant_experts=(32, 64), router_policy="round_robin")
    d = c.to_dict()
    assert d["kind"] == "disaggregated" and d["gpus"] == 32 + 320
    assert d["prefill"]["layout"] == "tp4dp8ep" and d["prefill"]["num_redundant_experts"] == 32
    assert d["decode"]["gpus"] == 320 and d["decode"]["num_redundant_experts"] == 64
    assert d["transfer"] == "mooncake" and d["router_policy"] == "round_robin"
    assert d["decode"]["engine_settings"]["max_num_seqs"] == 256


def test_a_split_across_engines_is_refused_naming_the_fix() -> None:
    other = replace(BASE, engine="sglang")
    with pytest.raises(SpecError, match=r"p:tp4\+d:tp4: the prefill pool runs sglang and the decode pool"):
        DisaggCandidate.of(parse_disagg("p:tp4+d:tp4"), other, BASE, "NixlConnector")


def test_pools_come_in_order() -> None:
    p = Pool("prefill", parse_layout("tp4"), BASE)
    with pytest.raises(ValueError):
        DisaggCandidate(p, p, "NixlConnector")
