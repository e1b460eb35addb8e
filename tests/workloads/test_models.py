"""The model catalog: layer counts, parameter totals against published figures, memory per GPU."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from hwmodels.dtypes import Dtype
from hwmodels.spec import load_gpu
from hwmodels.specfile import SpecError
from workloads.deployment import Deployment
from workloads.memory import plan_memory
from workloads.model import MODEL_DIR, Part, load_model, model_names
from workloads.params import active_matmul_params, count_params, total_params

CATALOG = {"kimi-k3", "deepseek-v3", "kimi-k2", "qwen3-32b", "qwen2.5-72b-instruct", "qwen3-235b-a22b",
           "minimax-m2", "deepseek-v4-flash", "llama-3.1-70b", "deepseek-r1", "llama-3.3-70b", "gpt-oss-120b",
           "gpt-oss-20b", "qwen3-8b"}


def test_the_catalog_is_complete():
    assert set(model_names()) == CATALOG
    assert load_model("deepseek-v4-flash").provisional


def test_kimi_k3_structure_matches_the_kimi_k3_study():
    k3 = load_model("kimi-k3")
    counts = k3.layer_counts()
    assert (counts["mla"], counts["kda"], counts["moe"], counts["dense_mlp"]) == (24, 69, 92, 1)
    assert (k3.moe.experts, k3.moe.top_k, k3.moe.shared_experts, k3.moe.latent_size) == (896, 16, 2, 3584)
    assert k3.mla.latent_width == 576 and k3.attnres_block_size == 12


def test_kimi_k3_parameters_are_within_3_percent_of_2_8_trillion():
    assert total_params(load_model("kimi-k3")) == pytest.approx(2.8e12, rel=0.03)


def test_kimi_k3_checkpoint_bytes_match_the_mxfp4_checkpoint():
    k3 = load_model("kimi-k3")
    checkpoint = sum(k3.weights[p].storage_bytes(n) for p, n in count_params(k3).items())
    assert checkpoint == pytest.approx(1.561e12, rel=0.01)
    # The safetensors element count packs two FP4 values per element and counts the scales.
    routed = count_params(k3)[next(p for p in k3.weights if p.value == "routed_experts")]
    elements = total_params(k3) - routed + routed / 2 + routed / 32
    assert elements == pytest.approx(1.5037e12, rel=0.01)


@pytest.mark.parametrize("name", sorted(CATALOG - {"kimi-k3"}))
def test_every_other_model_is_within_2_percent_of_its_published_total(name):
    model = load_model(name)
    assert total_params(model) == pytest.approx(model.published_params, rel=0.02)
    assert model.sources["published_params"]


@pytest.mark.parametrize(("name", "same_as"), [("deepseek-r1", "deepseek-v3"), ("llama-3.3-70b", "llama-3.1-70b")])
def test_new_releases_of_an_architecture_match_it(name, same_as):
    # DeepSeek-R1 is DeepSeek-V3's architecture and FP8 checkpoint; Llama 3.3 70B is Llama 3.1 70B's
    model, base = load_model(name), load_model(same_as)
    assert dataclasses.replace(model, name=base.name, description=base.description) == base
    assert model.sources["hidden_size"] != base.sources["hidden_size"]  # each cites its own config


def test_gpt_oss_structure_matches_its_config():
    m = load_model("gpt-oss-120b")
    assert m.layer_counts() == {"gqa": 36, "mla": 0, "kda": 0, "moe": 36, "dense_mlp": 0}
    gqa = m.gqa
    assert (gqa.heads, gqa.kv_heads, gqa.head_dim, gqa.qkv_bias, gqa.attention_sinks) == (64, 8, 64, True, True)
    assert (m.moe.experts, m.moe.top_k, m.moe.shared_experts, m.moe.expert_intermediate_size) == (128, 4, 0, 2880)
    # layer_types alternate sliding_attention, full_attention from the first layer
    assert [m.attention_window(i) for i in range(1, 37)] == [128, 0] * 18
    assert m.weights[Part.ROUTED_EXPERTS] is Dtype.MXFP4
    assert {m.weights[p] for p in Part if p is not Part.ROUTED_EXPERTS} == {Dtype.BF16}


def test_gpt_oss_counts_match_the_model_card():
    m = load_model("gpt-oss-120b")
    # 116.8B total (the experts' biases, 40M, are not counted), 5.1B active, a 60.8 GiB checkpoint ([S63b])
    assert total_params(m) == pytest.approx(116.8e9, rel=0.001)
    assert active_matmul_params(m) == pytest.approx(5.13e9, rel=0.01)
    checkpoint = sum(m.weights[p].storage_bytes(n) for p, n in count_params(m).items())
    assert checkpoint / 2**30 == pytest.approx(60.8, rel=0.005)


def test_gpt_oss_20b_is_the_same_layer_with_fewer_layers_and_experts_and_matches_its_card():
    small, large = load_model("gpt-oss-20b"), load_model("gpt-oss-120b")
    assert small.layer_counts() == {"gqa": 24, "mla": 0, "kda": 0, "moe": 24, "dense_mlp": 0}
    assert (small.moe.experts, small.moe.top_k) == (32, 4)
    assert (small.gqa.heads, small.gqa.kv_heads, small.gqa.head_dim) == (large.gqa.heads, large.gqa.kv_heads, 64)
    assert [small.attention_window(i) for i in range(1, 25)] == [128, 0] * 12
    # 20.9B total, 3.6B active, a 12.8 GiB checkpoint ([S64b])
    assert total_params(small) == pytest.approx(20.9e9, rel=0.002)
    assert active_matmul_params(small) == pytest.approx(3.61e9, rel=0.01)
    checkpoint = sum(small.weights[p].storage_bytes(n) for p, n in count_params(small).items())
    assert checkpoint / 2**30 == pytest.approx(12.8, rel=0.005)


def test_gpt_oss_kv_prices_sliding_layers_as_full_attention():
    # assumption (workloads/memory.py): every layer keeps every cached token's K and V
    plan = plan_memory(Deployment(load_model("gpt-oss-120b"), load_gpu("h200"), tp=8))
    assert plan.gqa_kv_bytes_per_token == 36 * 2 * 1 * 64 * 2


def _with_gqa(tmp_path, **gqa):
    raw = yaml.safe_load((MODEL_DIR / "gpt-oss-120b.yaml").read_text())
    raw["gqa"].update(gqa)
    for key in [k for k, v in gqa.items() if v is None]:
        del raw["gqa"][key]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.mark.parametrize(("change", "message"), [
    ({"sliding_window": None}, r"gqa\.sliding_window: must be a positive number of tokens when sliding_window_layers"),
    ({"sliding_window_layers": None}, r"gqa\.sliding_window_layers: must list the layers that use the 128-token"),
    ({"sliding_window_layers": {"value": [1, 3, 3], "source": "x"}}, r"lists layers more than once: \[3\]"),
    ({"sliding_window_layers": {"value": [1, 37], "source": "x"}}, r"gqa\.sliding_window_layers: layers must be in "
                                                                   r"1\.\.36, got \[37\]"),
    ({"sliding_window": {"value": 1e9, "source": "x"}}, r"gqa\.sliding_window: 1000000000 is out of range"),
    ({"attention_sinks": "yes"}, r"gqa\.attention_sinks: must be true or false"),
])
def test_a_bad_sliding_window_is_named(tmp_path, change, message):
    with pytest.raises(SpecError, match=message):
        load_model(_with_gqa(tmp_path, **change))


def test_kimi_k3_weights_per_gpu_at_tp8_are_an_eighth_of_the_checkpoint():
    plan = plan_memory(Deployment(load_model("kimi-k3"), load_gpu("mi355x"), tp=8))
    assert plan.weights_bytes_per_gpu == pytest.approx(1.561e12 / 8, rel=0.05)
    row_only = Deployment(load_model("kimi-k3"), load_gpu("mi355x"), tp=8)
    from dataclasses import replace

    from workloads.deployment import KernelOptions
    row_only = replace(row_only, options=KernelOptions(moe_row_only_weights=True))
    # Kimi K3 study, mechanism 3: loading only the routed-output rows a rank uses frees HBM for KV.
    saved = plan.weights_bytes_per_gpu - plan_memory(row_only).weights_bytes_per_gpu
    assert saved == pytest.approx(92 * 7168 * 3584 * 2 * 7 / 8, rel=0.01)


def test_mla_history_per_gpu_and_dcp_sharding():
    k3, gpu = load_model("kimi-k3"), load_gpu("mi355x")
    plan = plan_memory(Deployment(k3, gpu, tp=8))
    assert plan.mla_kv_bytes_per_token * 142_000 == pytest.approx(24 * 142_000 * 576, rel=0.01)
    dcp8 = plan_memory(Deployment(k3, gpu, tp=8, dcp=8))
    assert dcp8.mla_kv_bytes_per_token == pytest.approx(plan.mla_kv_bytes_per_token / 8)
    # KDA state keeps its head partition: 69 layers x 12 heads x 128 x 128 fp32 per sequence.
    assert dcp8.kda_state_bytes_per_seq == plan.kda_state_bytes_per_seq == 69 * 12 * 128 * 128 * 4
    assert dcp8.kv_capacity_tokens > 7 * plan.kv_capacity_tokens


def test_the_memory_fraction_is_of_the_device_memory_the_runtime_reports():
    # SGLang served DeepSeek-R1 FP8 at TP4 on B200s with --mem-fraction-static 0.95 (validation/published/serving.csv):
    # 169 GB of weights per GPU fit in 95 % of the 178.35 GiB CUDA reports, not in 95 % of the 180 GB datasheet figure
    b200 = load_gpu("b200")
    assert b200.memory_total_bytes == pytest.approx(178.35 * 2**30) and b200.hbm_capacity_bytes == 180e9
    plan = plan_memory(Deployment(load_model("deepseek-r1"), b200, tp=4, kv_cache=Dtype.FP8), mem_fraction=0.95,
                       max_num_seqs=32)
    assert plan.kv_capacity_tokens > 32 * 9216  # the rows' 32 requests of 8k + 1k tokens in their FP8 KV cache
    no_runtime_figure = dataclasses.replace(b200, device_memory_bytes=None)
    with pytest.raises(ValueError, match=r"deepseek-r1 does not fit on b200 at tp=4.*of 180\.0 GB"):
        plan_memory(Deployment(load_model("deepseek-r1"), no_runtime_figure, tp=4), mem_fraction=0.95, max_num_seqs=32)


def test_gqa_kv_per_token():
    plan = plan_memory(Deployment(load_model("llama-3.1-70b"), load_gpu("h200"), tp=8))
    assert plan.gqa_kv_bytes_per_token == 80 * 2 * 1 * 128 * 2  # one KV head per rank at TP8, bf16
    assert plan.mla_kv_bytes_per_token == 0 and plan.kda_state_bytes_per_seq == 0


@pytest.mark.parametrize(("tp", "message"), [(5, r"tp=5 does not divide kimi-k3's 96 mla heads \(valid tp: 1, 2, 3, 4"),
                                              (1, "kimi-k3 does not fit on mi355x at tp=1")])
def test_bad_plans_are_named(tp, message):
    with pytest.raises(ValueError, match=message):
        plan_memory(Deployment(load_model("kimi-k3"), load_gpu("mi355x"), tp=tp))


def test_dcp_must_divide_tp():
    with pytest.raises(ValueError, match="dcp=3 must divide tp=8"):
        Deployment(load_model("kimi-k3"), load_gpu("mi355x"), tp=8, dcp=3)


def test_a_bad_model_file_is_named(tmp_path):
    raw = yaml.safe_load((MODEL_DIR / "qwen3-32b.yaml").read_text())
    raw["gqa"]["kv_heads"]["value"] = 7
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError, match=r"bad\.yaml: gqa\.kv_heads: must divide heads \(64\), got 7"):
        load_model(str(path))
    raw = yaml.safe_load((MODEL_DIR / "qwen3-32b.yaml").read_text())
    raw["gqa"]["head_dimm"] = raw["gqa"].pop("head_dim")
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError, match=r"gqa\.head_dimm: unknown key \(valid keys: heads, kv_heads, head_dim"):
        load_model(str(path))


def test_unknown_model_lists_the_catalog():
    with pytest.raises(SpecError, match=r"unknown model \(valid: deepseek-r1, deepseek-v3, deepseek-v4-flash"):
        load_model("gpt-5")


def test_saved_kda_checkpoints_take_their_share_of_the_kv_capacity():
    # Kimi K3 study, mechanism 2: a cached prefix keeps a KDA state every checkpoint interval beside its MLA history
    d = Deployment(load_model("kimi-k3"), load_gpu("mi355x"), tp=8)
    plain = plan_memory(d)
    every_2048 = plan_memory(d, kda_checkpoint_tokens=2048)
    every_128 = plan_memory(d, kda_checkpoint_tokens=128)
    state = plain.kda_state_bytes_per_seq + plain.kda_conv_bytes_per_seq
    assert every_2048.kda_checkpoint_bytes_per_token == pytest.approx(state / 2048)
    assert every_2048.kv_bytes_per_token == pytest.approx(plain.mla_kv_bytes_per_token + state / 2048)
    assert every_2048.kv_capacity_tokens == int(plain.kv_budget_bytes // every_2048.kv_bytes_per_token)
    assert plain.kv_capacity_tokens > every_2048.kv_capacity_tokens > every_128.kv_capacity_tokens > 0
    llama = Deployment(load_model("llama-3.1-70b"), load_gpu("h200"), tp=8)  # no KDA: nothing to save
    assert plan_memory(llama, kda_checkpoint_tokens=128).kv_capacity_tokens == plan_memory(llama).kv_capacity_tokens
