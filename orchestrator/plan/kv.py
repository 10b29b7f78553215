"""KV cache per layer kind, laid out as vLLM's hybrid KV cache manager lays it out.

Full-attention layers hold the whole context, sliding-window layers the window, chunked layers
(Llama-4) the current chunk, and state layers (Gated DeltaNet, Mamba) a fixed state per sequence.

vLLM 0.32/0.33, vllm/v1/core/kv_cache_utils.py and vllm/v1/kv_cache_interface.py:
- every layer's page (one block of one layer) has one size: attention pages are block_size tokens
  (16 by default); a Mamba/GDN state is padded to the attention page, and the attention block size
  is raised until a page holds a state (platforms/interface.py `_align_hybrid_block_size`: the block
  size is 16 * ceil(state bytes / (16 * attention bytes per token)));
- layers of one kind form groups of equal size (`_get_kv_cache_groups_uniform_page_size`): the group
  size is the smallest kind's layer count (the largest's when that is under 1.5x the smallest); a kind
  with more layers splits into ceil(n / group size) groups;
- one pool of blocks serves every group; a block costs one page per layer of the largest group
  (`_get_kv_cache_bytes_per_block`), and num_blocks = available memory // that;
- per sequence, a full group holds ceil(context / block) blocks, a sliding group at most
  ceil(window / block) + 1, a chunked group the blocks of its chunk, a state group one block;
- at start the engine checks that one max_model_len request fits (`check_enough_kv_cache_memory`):
  the sum over layers of each spec's `max_memory_usage_bytes`, sliding and chunked layers counting
  their window plus the step's token budget in flight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.catalog.types import ATTENTION_KINDS, CHUNKED, FULL, LINEAR, MAMBA, SLIDING, ModelConfig
from orchestrator.errors import SpecError

BLOCK_TOKENS = 16  # vLLM's default block size (CacheConfig.DEFAULT_BLOCK_SIZE)
STATE = "state"


@dataclass(frozen=True)
class KVGroup:
    kind: str  # full | sliding | chunked | state
    window_tokens: int  # sliding window or chunk; 0 for full and state groups
    layers: int  # real layers in the group (at most the group size)


@dataclass(frozen=True)
class KVCacheShape:
    """How one GPU of one PP stage holds KV: block size, page, groups. Bytes are per GPU."""

    block_tokens: int
    page_bytes: float  # one layer's page, after padding to the common size
    groups: tuple[KVGroup, ...]
    full_bytes_per_token: float  # exact bytes per context token of the full-attention layers
    window_bytes_per_token: tuple[tuple[float, int], ...]  # (bytes per token, window) per window kind
    state_bytes_per_sequence: float  # exact state bytes of the state layers (read and written per step)

    @property
    def bytes_per_block(self) -> float:
        """One block of the pool: a page for every layer slot of the largest group."""
        return self.page_bytes * max((g.layers for g in self.groups), default=0)

    @property
    def growing_groups(self) -> int:
        """Groups whose blocks grow with the context: the full ones (or, with none, every attention
        group: then the simulator's token count over-counts past the window; the planner does not)."""
        full = sum(1 for g in self.groups if g.kind == FULL)
        return full or sum(1 for g in self.groups if g.kind != STATE)

    def blocks_per_sequence(self, context_tokens: int) -> int:
        b, c = self.block_tokens, max(context_tokens, 1)
        blocks = 0
        for g in self.groups:
            if g.kind == FULL:
                blocks += math.ceil(c / b)
            elif g.kind == SLIDING:
                blocks += math.ceil(c / b) if c <= g.window_tokens else math.ceil(g.window_tokens / b) + 1
            elif g.kind == CHUNKED:
                blocks += math.ceil(min(c, g.window_tokens) / b)
            else:
                blocks += 1
        return blocks

    def bytes_per_sequence(self, context_tokens: int) -> float:
        return self.blocks_per_sequence(context_tokens) * self.bytes_per_block

    def sequences(self, free_bytes: float, context_tokens: int) -> int:
        """Sequences of `context_tokens` the pool holds (one block is vLLM's null block)."""
        per_block = self.bytes_per_block
        if per_block <= 0:
            return 0
        blocks = math.floor(free_bytes / per_block) - 1
        return max(blocks // self.blocks_per_sequence(context_tokens), 0)

    def capacity_tokens(self, free_bytes: float) -> int:
        """Context tokens the pool holds in the growing groups' blocks, no sequence's side blocks counted."""
        per_block = self.bytes_per_block
        if per_block <= 0:
            return 0
        blocks = math.floor(free_bytes / per_block) - 1
        return max(blocks * self.block_tokens // max(self.growing_groups, 1), 0)

    def side_tokens(self, context_tokens: int) -> int:
        """A sequence's blocks outside the growing groups, in the growing groups' tokens."""
        grow = self.growing_groups
        side = self.blocks_per_sequence(context_tokens) - grow * math.ceil(max(context_tokens, 1)
                                                                           / self.block_tokens)
        return max(side, 0) * self.block_tokens // max(grow, 1)

    def max_len_bytes(self, max_model_len: int, step_budget_tokens: int) -> float:
        """What vLLM checks at start: one max_model_len request, summed over layers (no padding)."""
        b, n = self.block_tokens, max_model_len
        total = 0.0
        for g in self.groups:
            if g.kind == FULL:
                blocks = math.ceil(n / b)
            elif g.kind == SLIDING:
                blocks = math.ceil(min(g.window_tokens - 1 + step_budget_tokens, n) / b) + 1
            elif g.kind == CHUNKED:
                blocks = math.ceil(min(g.window_tokens + step_budget_tokens, n) / b)
            else:
                blocks = 1
            total += blocks * g.layers * self.page_bytes
        return total

    def read_bytes(self, kv_tokens: float, sequences: float) -> float:
        """Bytes a step reads for `sequences` sequences holding `kv_tokens` context tokens in all: full
        layers read everything, window layers at most their window each, state layers their state."""
        out = self.full_bytes_per_token * kv_tokens + self.state_bytes_per_sequence * sequences
        for per_token, window in self.window_bytes_per_token:
            out += per_token * min(kv_tokens, sequences * window)
        return out


def attention_bytes_per_token(cfg: ModelConfig, kv_bytes_per_value: float, tp: int) -> float:
    """One attention layer, one token, one GPU: 2 ceil(h_kv/n) d_head b, or MLA's replicated latent."""
    if cfg.is_mla:
        return (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * kv_bytes_per_value
    return 2 * math.ceil(cfg.num_kv_heads / tp) * cfg.head_dim * kv_bytes_per_value


def state_bytes(cfg: ModelConfig, kind: str, kv_bytes_per_value: float, tp: int) -> float:
    """One state layer's state per sequence on one GPU (vLLM mamba_utils.py state shapes, split by TP):
    GDN: conv (2 key + value dims) x (kernel - 1) + ssm value heads x d_v x d_k; Mamba-1: conv d_inner x
    (kernel - 1) + ssm d_inner x d_state. The conv state is in the KV dtype, the ssm state in the
    config's mamba_ssm_dtype when it names one."""
    if kind == LINEAR and cfg.linear_attention is not None:
        la = cfg.linear_attention
        conv = (2 * la.key_dim + la.value_dim) // tp * (la.conv_kernel - 1)
        ssm = la.num_value_heads // tp * la.value_head_dim * la.key_head_dim
        return conv * kv_bytes_per_value + ssm * (la.ssm_state_bytes_per_value or kv_bytes_per_value)
    if kind == MAMBA and cfg.mamba is not None:
        m = cfg.mamba
        inner = m.inner_size // tp
        return (inner * (m.conv_kernel - 1) * kv_bytes_per_value
                + inner * m.state_size * (m.ssm_state_bytes_per_value or kv_bytes_per_value))
    raise SpecError(f"{cfg.name}: layer kind {kind!r} has no state shape")


def _group_size(counts: list[int]) -> int:
    smallest, largest = min(counts), max(counts)
    return largest if largest < smallest * 1.5 else smallest


def kv_cache_shape(cfg: ModelConfig, layers: range, *, kv_bytes_per_value: float, tp: int,
                   block_tokens: int = BLOCK_TOKENS, max_model_len: int | None = None) -> KVCacheShape:
    """The KV layout of the GPUs holding `layers` (one PP stage) under TP `tp`.

    A window at least `max_model_len` long never slides: those layers are full attention."""
    per_token = attention_bytes_per_token(cfg, kv_bytes_per_value, tp)
    buckets: dict[tuple[str, int], int] = {}
    state_total = 0.0
    state_page = 0.0
    for i in layers:
        kind = cfg.layer_kind(i)
        window = {SLIDING: cfg.sliding_window, CHUNKED: cfg.attention_chunk_size}.get(kind, 0)
        if kind in (SLIDING, CHUNKED) and max_model_len is not None and window >= max_model_len:
            kind, window = FULL, 0
        if kind in ATTENTION_KINDS:
            buckets[(kind, window)] = buckets.get((kind, window), 0) + 1
        else:
            one = state_bytes(cfg, kind, kv_bytes_per_value, tp)
            state_total += one
            state_page = max(state_page, one)
            buckets[(STATE, 0)] = buckets.get((STATE, 0), 0) + 1
    block = block_tokens
    if state_page and per_token:
        block = 16 * math.ceil(state_page / (16 * per_token))  # attention page >= the state's
        block = max(block, block_tokens)
    page = max(block * per_token, state_page)
    if not buckets:
        return KVCacheShape(block, page, (), 0.0, (), 0.0)
    size = _group_size(list(buckets.values()))
    groups: list[KVGroup] = []
    for (kind, window), n in buckets.items():
        parts = math.ceil(n / size)
        for j in range(parts):
            groups.append(KVGroup(kind, window, len(range(j, n, parts))))
    full_layers = buckets.get((FULL, 0), 0)
    windows = tuple((n * per_token, w) for (kind, w), n in buckets.items() if kind in (SLIDING, CHUNKED))
    return KVCacheShape(block, page, tuple(groups), full_layers * per_token, windows, state_total)


def kv_bytes_per_token(cfg: ModelConfig, kv_bytes_per_value: float) -> float:
    """Bytes per context token of the whole model on one GPU, counting only the layers whose KV grows
    with the context (full attention): window, chunk and state layers hold a bounded amount per
    sequence (`kv_bytes_per_sequence`)."""
    full = sum(1 for i in range(cfg.num_layers) if cfg.layer_kind(i) == FULL)
    return full * attention_bytes_per_token(cfg, kv_bytes_per_value, 1)


def kv_bytes_per_sequence(cfg: ModelConfig, kv_bytes_per_value: float, context_tokens: int) -> float:
    """Exact bytes one sequence of `context_tokens` holds on one GPU (no blocks, no padding): full
    layers the context, sliding layers min(context, window), chunked layers min(context, chunk), state
    layers their state."""
    per = attention_bytes_per_token(cfg, kv_bytes_per_value, 1)
    out = 0.0
    for i in range(cfg.num_layers):
        kind = cfg.layer_kind(i)
        if kind == FULL:
            out += per * context_tokens
        elif kind == SLIDING:
            out += per * min(context_tokens, cfg.sliding_window)
        elif kind == CHUNKED:
            out += per * min(context_tokens, cfg.attention_chunk_size)
        else:
            out += state_bytes(cfg, kind, kv_bytes_per_value, 1)
    return out
