"""Kernels, document masks and compilation (lm_assets/training/kernels.py, lm_assets/training/model.py) on CPU.

- Document masking: a packed row computed with document masks gives, at every position, the
  logits of its document run alone, through the dense SDPA mask (the CPU path) and through
  FlexAttention's block mask (the CUDA path's math, run eagerly here);
- the kernels that run on CPU (`F.rms_norm`, fused AdamW) equal the eager reference;
- the engine compiled and eager give the same losses for 10 steps on the tiny preset, and the run
  says what it ran;
- `resolve` refuses a kernel that cannot run here instead of swapping it.
"""

from __future__ import annotations

import pytest
import torch

from tests.training.test_training_parallel import VOCAB, base, losses, run_ok, write_packed
from lm_assets.training import kernels
from lm_assets.training.config import KernelConfig, from_preset
from lm_assets.training.kernels import Kernels, document_ids, document_positions
from lm_assets.training.model import Transformer, use_kernels

EOS = 3


def test_document_ids_and_positions():
    row = torch.tensor([[7, 8, EOS, 9, 10, 11, EOS, EOS, 12], [5, 6, 7, 8, 9, 10, 11, 12, 13]])
    ids = document_ids(row, EOS)
    assert ids.tolist() == [[0, 0, 0, 1, 1, 1, 1, 2, 3], [0] * 9]
    assert document_positions(ids).tolist() == [[0, 1, 2, 0, 1, 2, 3, 0, 0], list(range(9))]


def _packed_rows(generator: torch.Generator) -> tuple[torch.Tensor, list[list[list[int]]]]:
    """Two rows of 40 tokens: documents of different lengths, each ending with EOS, the first row
    opening mid-document, the second ending in a cut document."""
    lengths = [[6, 17, 3, 14], [25, 9, 6]]  # with their EOS; the last of each row is cut, no EOS
    rows, docs = [], []
    for row_lengths in lengths:
        row, pieces = [], []
        for i, n in enumerate(row_lengths):
            body = torch.randint(4, VOCAB, (n,), generator=generator).tolist()
            if i < len(row_lengths) - 1:
                body[-1] = EOS
            pieces.append(body)
            row += body
        assert len(row) == 40
        rows.append(row)
        docs.append(pieces)
    return torch.tensor(rows), docs


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("attention", ["sdpa", "flex"])
def test_document_mask_equals_per_document_forward(attention):
    torch.manual_seed(0)
    cfg = from_preset("tiny", VOCAB)
    model = Transformer(cfg, seed=3, kernels=Kernels(attention=attention)).eval()
    rows, docs = _packed_rows(torch.Generator().manual_seed(1))
    with torch.no_grad():
        packed = model(rows, document_ids(rows, EOS))
        whole = model(rows)  # without masks: documents see each other
        use_kernels(model, Kernels())
        for r, pieces in enumerate(docs):
            start = 0
            for piece in pieces:
                alone = model(torch.tensor([piece]))[0]
                torch.testing.assert_close(packed[r, start : start + len(piece)], alone, rtol=0, atol=1e-5)
                start += len(piece)
    # The masks matter: past the first document the unmasked logits differ.
    assert (whole[0, 6:] - packed[0, 6:]).abs().max() > 1e-2


def test_document_mask_gradients_equal_per_document_gradients():
    cfg = from_preset("tiny", VOCAB)
    rows, docs = _packed_rows(torch.Generator().manual_seed(2))
    packed_model, alone_model = Transformer(cfg, seed=4), Transformer(cfg, seed=4)
    packed_model(rows, document_ids(rows, EOS)).float().pow(2).sum().backward()
    total = sum(alone_model(torch.tensor([p])).float().pow(2).sum() for pieces in docs for p in pieces)
    total.backward()
    for (name, a), b in zip(packed_model.named_parameters(), alone_model.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_torch_rms_norm_equals_eager():
    norm_input = torch.randn(3, 5, 64, dtype=torch.bfloat16)
    weight = torch.rand(64, dtype=torch.bfloat16) + 0.5
    reference = kernels.rms_norm(norm_input, weight, 1e-5, "eager")
    fused = kernels.rms_norm(norm_input, weight, 1e-5, "torch")
    assert fused.dtype == torch.bfloat16
    torch.testing.assert_close(fused, reference, rtol=0, atol=0)


def test_fused_adamw_equals_the_reference():
    torch.manual_seed(0)
    params = [torch.randn(32, 16), torch.randn(16)]
    runs = {}
    for fused in (False, True):
        p = [torch.nn.Parameter(t.clone()) for t in params]
        opt = torch.optim.AdamW(
            [{"params": p[:1]}, {"params": p[1:], "weight_decay": 0.0}], lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1,
            fused=fused or None,
        )
        g = torch.Generator().manual_seed(1)
        for _ in range(5):
            for t in p:
                t.grad = torch.randn(t.shape, generator=g)
            opt.step()
        runs[fused] = p
    for a, b in zip(runs[False], runs[True]):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_resolve_auto_and_refusals():
    auto = kernels.resolve(KernelConfig(), "cpu", document_mask=True)
    assert auto == Kernels(rms_norm="torch", rope="eager", swiglu="eager", cross_entropy="eager", attention="sdpa")
    cuda = kernels.resolve(KernelConfig(), "cuda", document_mask=True)
    assert cuda.attention == "flex"
    assert kernels.resolve(KernelConfig(), "cuda", document_mask=False).attention == "sdpa"
    if not kernels.liger_available():
        assert cuda.rms_norm == "torch" and cuda.rope == "eager"
        with pytest.raises(ValueError, match="liger-kernel is not installed"):
            kernels.resolve(KernelConfig(rope="liger"), "cuda", document_mask=True)
    with pytest.raises(ValueError, match="needs CUDA"):
        kernels.resolve(KernelConfig(swiglu="liger"), "cpu", document_mask=True)
    with pytest.raises(ValueError, match="needs CUDA"):
        kernels.resolve(KernelConfig(attention="flex"), "cpu", document_mask=True)
    with pytest.raises(ValueError, match="only the causal mask"):
        kernels.resolve(KernelConfig(attention="flash"), "cuda", document_mask=True)


@pytest.mark.slow
def test_compiled_engine_matches_eager(tmp_path):
    data = write_packed(tmp_path / "packed")
    runs, summaries = {}, []
    for compiled in (False, True):
        overrides = base(data, 10, micro_batch_size=2, compile=compiled, **{"debug.profile_step": 2})
        runs[compiled] = run_ok(1, overrides, "python", summaries)
    assert len(runs[True]) == 10
    assert losses(runs[True]) == pytest.approx(losses(runs[False]), abs=1e-4)
    eager, compiled = summaries
    assert (eager["compiled"], compiled["compiled"]) == (False, True)
    assert compiled["document_mask"] is True
    assert compiled["kernels"] == {"rms_norm": "torch", "rope": "eager", "swiglu": "eager", "cross_entropy": "eager",
                                   "attention": "sdpa", "fused_adamw": True}  # fmt: skip
    # The profiled step names the kernels that ran: fused AdamW in both, F.rms_norm's op in eager
    # (compiled, the norm is inside the generated code).
    assert eager["profile"]["step"] == 2
    assert "aten::_fused_adamw_" in eager["profile"]["notable"] and "aten::_fused_rms_norm" in eager["profile"]["notable"]
    assert "aten::_fused_adamw_" in compiled["profile"]["notable"]


@pytest.mark.slow
def test_compiled_pipeline_and_tensor_parallel_match_eager_single_process(tmp_path):
    """Blocks compile the same way inside pipeline stages and with tensor-parallel linears."""
    data = write_packed(tmp_path / "packed")
    common = base(data, 6, micro_batch_size=2)
    single = run_ok(1, common + ["compile=false"], "python")
    summaries = []
    three_d = run_ok(4, common + ["compile=true", "parallel.pp=2", "parallel.tp=2"], summaries=summaries)
    assert summaries[0]["compiled"] is True and summaries[0]["layout"]["tp"] == 2
    assert losses(three_d) == pytest.approx(losses(single), abs=1e-4)


def test_each_model_runs_on_its_own_kernels():
    cfg = from_preset("tiny", VOCAB)
    torch_norm = Transformer(cfg, seed=5, kernels=Kernels(rms_norm="torch"))
    eager = Transformer(cfg, seed=5)
    kinds = {m.kernels for m in torch_norm.modules() if hasattr(m, "kernels")}
    assert kinds == {Kernels(rms_norm="torch")}
    assert {m.kernels for m in eager.modules() if hasattr(m, "kernels")} == {Kernels()}
    ids = torch.randint(4, VOCAB, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(torch_norm(ids), eager(ids), rtol=1e-5, atol=1e-5)
