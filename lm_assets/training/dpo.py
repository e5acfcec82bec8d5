"""DPO in the training loop: each pair's log-probabilities, the reference's, and the per-step and
validation figures a run reports (the loss itself is `lm_assets.training.preference.dpo_loss`).

Data. Preference data holds a pair to a row: the chosen conversation, EOS, the rejected one, EOS,
PAD (`lm_assets.sft.packing.pack_pairs`). With document masks each conversation attends to itself
only, positions restarting, so one forward scores both answers as if each were alone. `sides` marks
each target as the chosen answer's (1) or the rejected answer's (2); a side's log-probability is the
sum over its tokens.

The reference is the model the run starts from, without a second copy in memory:

- `precomputed`: before the first step, the starting model scores every row of the train and val
  splits (each data-parallel rank a share, tensor-parallel ranks together), and the table is kept in
  `<checkpoint.dir>/reference/` (`scores.pt`, and `identity.json`: what it was computed for and the
  sha256 of `scores.pt`). A resumed run reads that table, so it continues exactly, once it is the file
  recorded and fits the run (`ReferenceScores.check`: shapes against the splits, finite values). For the
  KL on validation pairs the reference's log-probabilities over the vocabulary at each scored
  position of the validation rows are kept too, in float16 (rows x answer tokens x vocabulary x 2
  bytes: validation reads at most `validation.batches` micro-batches per rank);
- `adapter-disabled`: with a LoRA adapter, the same model with the adapter switched off, run without
  gradients beside each micro-batch (PEFT's `disable_adapter()`).

Figures. Per step: the loss, reward accuracy (the share of pairs whose chosen reward is higher), the
mean reward margin, the mean chosen and rejected rewards and log-probabilities. On validation pairs
the same, and the mean per-token KL(policy || reference) over the answers' tokens.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import torch
import torch.distributed as dist

from lm_assets.training.config import DpoConfig
from lm_assets.training.data import PackedDataset
from lm_assets.training.preference import dpo_loss, kl_to_reference
from lm_assets.training.primitives import atomic_path

CHOSEN, REJECTED = 1, 2
STATS = ("reward_accuracy", "reward_margin", "chosen_reward", "rejected_reward", "chosen_logp", "rejected_logp")
REFERENCE_FOLDER = "reference"
SCORES_FILE, IDENTITY_FILE = "scores.pt", "identity.json"


def side_log_probs(logits: torch.Tensor, targets: torch.Tensor, sides: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's summed log-probability of its chosen and of its rejected answer: `[rows]` each."""
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    return (logp * (sides == CHOSEN)).sum(-1), (logp * (sides == REJECTED)).sum(-1)


def pair_stats(out, policy_chosen: torch.Tensor, policy_rejected: torch.Tensor) -> torch.Tensor:
    """The sums over a batch's pairs of the figures in `STATS`, and the pair count last (to be summed over
    ranks and micro-batches, then divided)."""
    margin = out.chosen_rewards - out.rejected_rewards
    return torch.stack([(margin > 0).double().sum(), margin.double().sum(), out.chosen_rewards.double().sum(),
                        out.rejected_rewards.double().sum(), policy_chosen.detach().double().sum(),
                        policy_rejected.detach().double().sum(), torch.tensor(float(len(margin)), dtype=torch.float64,
                                                                            device=margin.device)])  # fmt: skip


def stats_dict(sums: torch.Tensor, prefix: str = "") -> dict[str, float]:
    count = max(float(sums[-1]), 1.0)
    return {prefix + name: float(sums[i]) / count for i, name in enumerate(STATS)}


class ReferenceScores:
    """The reference's summed log-probabilities of each row's chosen and rejected answer, per split
    (`precomputed`), and its log-probabilities over the vocabulary at the validation rows' answer tokens."""

    def __init__(self, logps: dict[str, torch.Tensor], val_logprobs: dict[int, torch.Tensor]):
        self.logps = logps  # split -> [rows, 2] float64: chosen, rejected
        self.val_logprobs = val_logprobs  # val row -> [scored positions, vocab] float16

    def pairs(self, split: str, rows) -> tuple[torch.Tensor, torch.Tensor]:
        table = self.logps[split][torch.as_tensor(rows, dtype=torch.long)]
        return table[:, 0], table[:, 1]

    def save(self, folder: Path, identity: dict) -> None:
        """`scores.pt`, and `identity.json`: `identity` with the sha256 of `scores.pt`'s bytes."""
        buffer = io.BytesIO()
        torch.save({"logps": self.logps, "val_logprobs": self.val_logprobs}, buffer)
        content = buffer.getvalue()
        with atomic_path(folder / SCORES_FILE) as tmp:
            tmp.write_bytes(content)
        record = identity | {"scores_sha256": hashlib.sha256(content).hexdigest()}
        with atomic_path(folder / IDENTITY_FILE) as tmp:
            tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, folder: Path, identity: dict, val_positions: dict[int, int]) -> ReferenceScores:
        """The scores saved in `folder`, once they are known to be the ones computed for `identity` (the
        record, and the sha256 of `scores.pt` it holds) and to fit the run (`check`)."""
        record_file, scores_file = folder / IDENTITY_FILE, folder / SCORES_FILE
        saved = json.loads(record_file.read_text())
        digest = saved.pop("scores_sha256", None) if isinstance(saved, dict) else None
        if saved != identity:
            raise ValueError(f"the reference scores in {folder} were computed for {saved}, this run is {identity}; "
                             "they cannot serve it (start the run in a new checkpoint folder)")  # fmt: skip
        if digest is None:
            raise ValueError(f"{record_file} records no sha256 of {scores_file}; the scores cannot be told apart from "
                             "another file (start the run in a new checkpoint folder)")  # fmt: skip
        content = scores_file.read_bytes()
        if hashlib.sha256(content).hexdigest() != digest:
            raise ValueError(f"{scores_file} is not the file the run saved: its sha256 is "
                             f"{hashlib.sha256(content).hexdigest()}, {record_file} records {digest}")  # fmt: skip
        data = torch.load(io.BytesIO(content), weights_only=True)
        try:
            scores = cls(dict(data["logps"]), dict(data["val_logprobs"]))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{scores_file}: expected a dict of logps and val_logprobs tables") from err
        scores.check(identity["splits"], val_positions, identity["model"]["vocab_size"], str(scores_file))
        return scores

    def check(self, splits: dict[str, int], val_positions: dict[int, int], vocab_size: int, source: str) -> None:
        """Refuse scores that cannot be the reference's for this run: a `[rows, 2]` float64 table for each
        split of `splits` (rows per split), a `[scored positions, vocab_size]` float16 table for each
        validation row of `val_positions` (its scored positions), every value a finite log-probability."""
        if set(self.logps) != set(splits):
            raise ValueError(f"{source}: scores for the splits {sorted(self.logps)}, the run has {sorted(splits)}")
        for split, rows in splits.items():
            _check_table(self.logps[split], (rows, 2), torch.float64, source,
                         f"the scores of split {split!r}", f"the split has {rows} rows")  # fmt: skip
        if set(self.val_logprobs) != set(val_positions):
            have = sorted(self.val_logprobs)
            raise ValueError(f"{source}: the run validates on the validation rows {sorted(val_positions)}, the scores "
                             f"hold log-probabilities for {have if have else 'none'}")  # fmt: skip
        for row, positions in val_positions.items():
            _check_table(self.val_logprobs[row], (positions, vocab_size), torch.float16, source,
                         f"the log-probabilities of validation row {row}",
                         f"the row has {positions} scored positions and the model {vocab_size} tokens")  # fmt: skip


def _check_table(table, shape: tuple[int, int], dtype: torch.dtype, source: str, what: str, expected: str) -> None:
    if not isinstance(table, torch.Tensor) or table.dtype != dtype or tuple(table.shape) != shape:
        found = type(table).__name__
        if isinstance(table, torch.Tensor):
            found = f"{table.dtype} of shape {tuple(table.shape)}"
        raise ValueError(f"{source}: {what} are {found}, expected {dtype} of shape {shape} ({expected})")
    bad = int((~torch.isfinite(table)).sum())
    if bad:
        raise ValueError(f"{source}: {bad} of {what} are not finite (NaN or infinite)")
    positive = int((table > 0).sum())
    if positive:
        raise ValueError(f"{source}: {positive} of {what} are above 0, which no log-probability is")


def validation_rows(n_rows: int, batches: int, dp: int, micro_batch_size: int) -> list[list[int]]:
    """The validation rows by micro-batch: the first `batches * dp * micro_batch_size` rows (all, when the split
    is shorter), in file order, in micro-batches of `micro_batch_size` (the last may be short); data-parallel
    rank r reads micro-batches r, r + dp, ... Every held-back pair counts, however few there are."""
    rows = list(range(min(n_rows, batches * dp * micro_batch_size)))
    return [rows[k : k + micro_batch_size] for k in range(0, len(rows), micro_batch_size)]


class DpoObjective:
    """DPO's loss and figures for `Trainer` (`lm_assets.training.engine`): `cfg` the run's `DpoConfig`."""

    def __init__(self, cfg: DpoConfig, model: torch.nn.Module, device: torch.device, dp_rank: int, dp: int,
                 dp_group, micro_batch_size: int, eos_id: int | None, train_split: str = "train"):  # fmt: skip
        self.cfg = cfg
        self.train_split = train_split
        self.model = model  # the module the engine wraps: forwards without the engine's hooks
        self.device = device
        self.dp_rank, self.dp, self.dp_group = dp_rank, dp, dp_group
        self.micro_batch_size = micro_batch_size
        self.eos_id = eos_id
        self.reference: ReferenceScores | None = None

    # -- inputs --------------------------------------------------------------------------------

    def _inputs(self, dataset: PackedDataset, rows) -> tuple:
        from lm_assets.training import kernels

        x, y, sides = dataset.rows(rows)
        doc = None if self.eos_id is None else kernels.document_ids(x, self.eos_id)
        move = lambda t: None if t is None else t.to(self.device)  # noqa: E731
        return move(x), move(doc), move(y), move(sides)

    @torch.no_grad()
    def _reference_logits(self, x, doc) -> torch.Tensor:
        from lm_assets.training.lora import adapters_disabled

        with adapters_disabled(self.model):
            return self.model(x, doc)

    # -- the reference ---------------------------------------------------------------------------

    @torch.no_grad()
    def score_reference(self, datasets: dict[str, PackedDataset], val_split: str | None,
                        val_rows: list[list[int]]) -> ReferenceScores:  # fmt: skip
        """The starting model's scores of every row of `datasets` (each data-parallel rank a share, summed
        over the ranks) and its log-probabilities at the answer tokens of `val_split`'s rows `val_rows`."""
        was_training = self.model.training
        self.model.eval()
        logps = {}
        for split, dataset in datasets.items():
            table = torch.zeros(len(dataset), 2, dtype=torch.float64, device=self.device)
            mine = list(range(self.dp_rank, len(dataset), self.dp))
            for start in range(0, len(mine), self.micro_batch_size):
                rows = mine[start : start + self.micro_batch_size]
                x, doc, y, sides = self._inputs(dataset, rows)
                chosen, rejected = side_log_probs(self.model(x, doc), y, sides)
                table[rows, 0], table[rows, 1] = chosen.double(), rejected.double()
            if self.dp > 1:
                dist.all_reduce(table, group=self.dp_group)
            logps[split] = table.cpu()
        val_logprobs = {}
        if val_split is not None:
            for rows in val_rows:  # every rank keeps all of them: a few micro-batches, and a resume may change dp
                x, doc, y, sides = self._inputs(datasets[val_split], rows)
                logprobs = torch.log_softmax(self.model(x, doc).float(), dim=-1)
                for row, lp, s in zip(rows, logprobs, sides):
                    val_logprobs[row] = lp[s > 0].half().cpu()
        self.model.train(was_training)
        return ReferenceScores(logps, val_logprobs)

    @staticmethod
    def scored_positions(dataset: PackedDataset, val_rows: list[list[int]]) -> dict[int, int]:
        """Each row of `val_rows`' answer tokens: the positions the reference's log-probabilities are kept at."""
        out = {}
        for rows in val_rows:
            _, _, sides = dataset.rows(rows)
            out |= {row: int((s > 0).sum()) for row, s in zip(rows, sides)}
        return out

    # -- a micro-batch ---------------------------------------------------------------------------

    def micro_batch_loss(self, logits: torch.Tensor, y: torch.Tensor, x, doc, rows_and_sides) -> tuple:
        """The objective's loss of a training micro-batch and the figures it adds up (`Trainer`'s interface)."""
        rows, sides = rows_and_sides
        return self.loss(logits, y, sides, rows, self.train_split, x, doc)

    def step_metrics(self, sums: torch.Tensor) -> dict[str, float]:
        """A step's figures from its micro-batches' summed `pair_stats`."""
        return stats_dict(sums)

    def loss(self, logits: torch.Tensor, y: torch.Tensor, sides: torch.Tensor, rows, split: str, x, doc,
             ref_logits: torch.Tensor | None = None):  # fmt: skip
        """DPO's loss of one micro-batch, and its `pair_stats`; `ref_logits`, the reference's, when known."""
        chosen, rejected = side_log_probs(logits, y, sides)
        if self.cfg.reference == "precomputed":
            ref_chosen, ref_rejected = (t.to(chosen.device, chosen.dtype) for t in self.reference.pairs(split, rows))
        else:
            if ref_logits is None:
                ref_logits = self._reference_logits(x, doc)
            ref_chosen, ref_rejected = side_log_probs(ref_logits, y, sides)
        out = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, self.cfg.beta, self.cfg.label_smoothing,
                       self.cfg.loss_type)  # fmt: skip
        return out.loss, pair_stats(out, chosen, rejected)

    @torch.no_grad()
    def validate(self, dataset: PackedDataset, val_rows: list[list[int]]) -> dict[str, float]:
        """DPO's loss, figures and KL to the reference over this rank's share of `val_rows` (micro-batch
        `i * dp + dp_rank`), summed over the data-parallel ranks."""
        was_training = self.model.training
        self.model.eval()
        sums = torch.zeros(len(STATS) + 1, dtype=torch.float64, device=self.device)
        extra = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss sum, KL sum, micro-batches
        for rows in val_rows[self.dp_rank :: self.dp]:
            x, doc, y, sides = self._inputs(dataset, rows)
            logits = self.model(x, doc)
            ref_logits = None if self.cfg.reference == "precomputed" else self._reference_logits(x, doc)
            loss, stats = self.loss(logits, y, sides, rows, dataset.split, x, doc, ref_logits)
            sums += stats
            extra[0] += float(loss)
            extra[2] += 1
            for i, row in enumerate(rows):
                mask = sides[i] > 0
                if self.cfg.reference == "precomputed":
                    ref = self.reference.val_logprobs[row].to(logits.device).float()
                else:
                    ref = ref_logits[i][mask]
                extra[1] += float(kl_to_reference(logits[i][mask], ref, torch.ones(int(mask.sum()), device=logits.device)))
        if self.dp > 1:
            dist.all_reduce(sums, group=self.dp_group)
            dist.all_reduce(extra, group=self.dp_group)
        self.model.train(was_training)
        pairs = max(float(sums[-1]), 1.0)
        return {"val_loss": float(extra[0]) / max(float(extra[2]), 1.0), **stats_dict(sums, "val_"),
                "val_kl": float(extra[1]) / pairs}  # fmt: skip
