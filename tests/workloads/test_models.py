"""The model catalog: layer counts, parameter totals against published figures, memory per GPU."""

from __future__ import annotations

import pytest
import yaml

from hwmodels.spec import load_gpu
from hwmodels.specfile import SpecError
from workloads.deployment import Deployment
from workloads.memory import plan_memory
from workloads.model import MODEL_DIR, load_model, model_names
from workloads.params import count_params, total_params

CATALOG = {"kimi-k3", "deepseek-v3", "kimi-k2", "qwen3-32b", "qwen2.5-72b-instruct", "qwen3-235b-a22b",
           "minimax-m2", "deepseek-v4-flash", "llama-3.1-70b"}


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
    with pytest.raises(SpecError, match=r"unknown model \(valid: deepseek-v3, deepseek-v4-flash"):
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
