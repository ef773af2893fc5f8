"""Export small PyTorch models of the zoo's architectures to ONNX, with both of torch's exporters.

Run it in a venv with torch (CPU), onnx, onnxscript and onnxruntime==1.31.1, outside the repo's venv:

    python -m venv /work/torch-venv
    /work/torch-venv/bin/pip install torch onnx onnxscript onnxruntime==1.31.1
    /work/torch-venv/bin/python examples/onnx-zoo/export_zoo.py [MODEL ...]

It writes examples/onnx-zoo/<model>.<exporter>.onnx (exporter: torchscript, `dynamo=False`, opset 17 with a
dynamic batch axis; or dynamo, `dynamo=True`) and examples/onnx-zoo/MANIFEST.json. Each file is run by ONNX
Runtime (CPU, one thread) at batch sizes 1, 3 and 32 and must match torch within 1e-5, or the script
fails. An export that fails is recorded in MANIFEST.json with its error's first line. The tests read the
committed files and MANIFEST.json only: they never need torch.
"""

from __future__ import annotations

import hashlib
import json
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
OPSET = 17
TOLERANCE = 1e-5
BATCH_SIZES = (1, 3, 32)
N_PART = 16  # particles (constituents) per jet
K = 4  # neighbours of the EdgeConv


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.net(x), dim=-1)


class DeepJetLike(nn.Module):
    """Constituents [N, 8, P] through Conv1d and an LSTM over P, concatenated with the jet's globals."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(8, 16, 1), nn.ReLU(), nn.Conv1d(16, 8, 1), nn.ReLU())
        self.lstm = nn.LSTM(8, 16, batch_first=True)
        self.head = nn.Sequential(nn.Linear(16 + 6, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, cpf: torch.Tensor, glob: torch.Tensor) -> torch.Tensor:
        seq = self.conv(cpf).transpose(1, 2)
        _, (h, _) = self.lstm(seq)
        return torch.softmax(self.head(torch.cat([h[-1], glob], dim=1)), dim=-1)


def knn(points: torch.Tensor, k: int) -> torch.Tensor:
    """Indices [N, P, k] of each particle's k nearest others (as ParticleNet: topk on -distance^2)."""
    inner = -2 * torch.matmul(points.transpose(2, 1), points)
    xx = torch.sum(points**2, dim=1, keepdim=True)
    pairwise = -xx - inner - xx.transpose(2, 1)
    return pairwise.topk(k=k + 1, dim=-1)[1][:, :, 1:]


def edge_features(fts: torch.Tensor, idx: torch.Tensor, k: int) -> torch.Tensor:
    """[N, 2C, P, k]: each particle's features and the differences to its neighbours' (a gather)."""
    n, c, p = fts.size()
    base = torch.arange(0, n).view(-1, 1, 1) * p
    flat = (idx + base).view(-1)
    neighbours = fts.transpose(2, 1).reshape(-1, c)[flat, :].view(n, p, k, c).permute(0, 3, 1, 2)
    centre = fts.view(n, c, p, 1).repeat(1, 1, 1, k)
    return torch.cat((centre, neighbours - centre), dim=1)


class EdgeConv(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(2 * c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())
        self.shortcut = nn.Sequential(nn.Conv1d(c_in, c_out, 1, bias=False), nn.BatchNorm1d(c_out))

    def forward(self, points: torch.Tensor, fts: torch.Tensor) -> torch.Tensor:
        edges = self.conv(edge_features(fts, knn(points, K), K))
        return torch.relu(edges.mean(dim=-1) + self.shortcut(fts))


class ParticleNetLike(nn.Module):
    """points [N, 2, P], features [N, 4, P], mask [N, 1, P] (1 = a particle, 0 = padding)."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.edge1 = EdgeConv(4, 16)
        self.edge2 = EdgeConv(16, 16)
        self.head = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, points: torch.Tensor, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        mask = (mask != 0).float()
        points = points + (1.0 - mask) * 1e3  # padding far away: never a neighbour of a particle
        fts = self.bn(features) * mask
        fts = self.edge1(points, fts) * mask
        fts = self.edge2(fts, fts) * mask
        pooled = fts.sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)
        return torch.softmax(self.head(pooled), dim=-1)


class GRUBidir(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(6, 12, batch_first=True, bidirectional=True)
        self.out = nn.Linear(24, 3)

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(seq)
        return self.out(out[:, -1, :])


class TransformerBlock(nn.Module):
    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.dh = heads, dim // heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.out = nn.Linear(dim, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, p, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(n, p, 3, self.heads, self.dh).unbind(dim=2)
        scores = torch.einsum("nphd,nqhd->nhpq", q, k) / (self.dh**0.5)
        attn = torch.einsum("nhpq,nqhd->nphd", torch.softmax(scores, dim=-1), v).reshape(n, p, d)
        x = x + self.proj(attn)
        x = x + self.mlp(self.norm2(x))
        return self.out(x.mean(dim=1))


class Conv2dTagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ELU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, padding=1),
            nn.ELU(),
            nn.AvgPool2d(2),
        )
        self.out = nn.Linear(8 * 4 * 4, 2)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.out(torch.flatten(self.features(image), 1))


class NonZeroSum(nn.Module):
    """Data-dependent shapes (NonZero): an op the converter refuses, since XLA compiles fixed shapes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1)
        return flat[torch.nonzero(flat > 0).squeeze(1)].sum(dim=0, keepdim=True)


# name -> (model, inputs as (name, shape after the batch, kind), output name, symbolic particle axis or None)
InputSpec = tuple[str, tuple[int, ...], str]
PARTICLENET_INPUTS: list[InputSpec] = [
    ("points", (2, N_PART), "normal"),
    ("features", (4, N_PART), "normal"),
    ("mask", (1, N_PART), "mask"),
]
MODELS: dict[str, tuple[Callable[[], nn.Module], list[InputSpec], str, int | None]] = {
    "mlp": (MLP, [("x", (16,), "normal")], "probs", None),
    "deepjet_like": (DeepJetLike, [("cpf", (8, N_PART), "normal"), ("glob", (6,), "normal")], "probs", None),
    "particlenet_like": (ParticleNetLike, PARTICLENET_INPUTS, "probs", None),
    "gru_bidir": (GRUBidir, [("seq", (10, 6), "normal")], "logits", None),
    "transformer_block": (TransformerBlock, [("x", (N_PART, 16), "normal")], "logits", None),
    "conv2d_tagger": (Conv2dTagger, [("image", (1, 16, 16), "normal")], "logits", None),
    "particlenet_symbolic": (ParticleNetLike, PARTICLENET_INPUTS, "probs", 2),
    "nonzero_refused": (NonZeroSum, [("x", (4,), "normal")], "total", None),
}


def build(name: str) -> nn.Module:
    torch.manual_seed(sum(map(ord, name)))
    model = MODELS[name][0]()
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):  # running statistics that do something
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return model.eval()


def random_inputs(specs: list[InputSpec], batch: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for _, shape, kind in specs:
        if kind == "mask":  # the first n particles of each jet are real, at least K + 1 of them
            valid = rng.integers(K + 1, shape[-1] + 1, size=batch)
            arrays.append((np.arange(shape[-1]) < valid[:, None, None]).astype(np.float32))
        else:
            arrays.append(rng.standard_normal((batch, *shape)).astype(np.float32))
    return arrays


def export(name: str, exporter: str, path: Path) -> None:
    model, (_, specs, output, symbolic) = build(name), MODELS[name]
    names = [s[0] for s in specs]
    example = tuple(torch.from_numpy(a) for a in random_inputs(specs, 2, 0))
    if exporter == "torchscript":
        axes = {n: {0: "N", **({symbolic: "n_part"} if symbolic else {})} for n in names}
        torch.onnx.export(
            model,
            example,
            str(path),
            dynamo=False,
            opset_version=OPSET,
            input_names=names,
            output_names=[output],
            dynamic_axes={**axes, output: {0: "N"}},
        )
    else:
        batch, part = torch.export.Dim("N", min=1, max=4096), torch.export.Dim("n_part", min=K + 1, max=1024)
        shapes = {n: {0: batch, **({symbolic: part} if symbolic else {})} for n in names}
        program = torch.onnx.export(
            model,
            example,
            dynamo=True,
            input_names=names,
            output_names=[output],
            dynamic_shapes=shapes,
        )
        program.save(str(path))


def check_against_torch(name: str, path: Path) -> float:
    """The largest |ORT - torch| over batch sizes 1, 3, 32; fails above TOLERANCE."""
    model, specs = build(name), MODELS[name][1]
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    worst = 0.0
    for batch in BATCH_SIZES:
        arrays = random_inputs(specs, batch, batch)
        with torch.no_grad():
            expected = model(*(torch.from_numpy(a) for a in arrays)).numpy()
        got = session.run(None, {s[0]: a for s, a in zip(specs, arrays)})[0]
        assert got.shape == expected.shape, (name, batch, got.shape, expected.shape)
        worst = max(worst, float(np.max(np.abs(got - expected))) if got.size else 0.0)
    assert worst <= TOLERANCE, (path.name, worst)
    return worst


def describe(value: Any) -> dict[str, Any]:
    tensor = value.type.tensor_type
    dims = [d.dim_param if d.HasField("dim_param") else d.dim_value for d in tensor.shape.dim]
    return {
        "name": value.name,
        "shape": dims,
        "dtype": onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name,
    }


def entry(path: Path, exporter: str, deviation: float) -> dict[str, Any]:
    m = onnx.load(str(path))
    ops = sorted({(n.domain or "ai.onnx", n.op_type) for n in m.graph.node})
    return {
        "file": path.name,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "size": path.stat().st_size,
        "exporter": exporter,
        "opset": next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")),
        "producer": m.producer_name,
        "producer_version": m.producer_version,
        "inputs": [describe(v) for v in m.graph.input],
        "outputs": [describe(v) for v in m.graph.output],
        "ops": [list(o) for o in ops],
        "max_deviation_from_torch": deviation,
    }


def main(selected: list[str]) -> None:
    warnings.filterwarnings("ignore")
    manifest_path = HERE / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"files": {}}
    manifest["versions"] = {
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": ort.__version__,
    }
    manifest["tolerance"], manifest["batch_sizes"] = TOLERANCE, list(BATCH_SIZES)
    for name in selected or list(MODELS):
        for exporter in ("torchscript", "dynamo"):
            path = HERE / f"{name}.{exporter}.onnx"
            key = path.name
            try:
                export(name, exporter, path)
            except Exception as exc:  # recorded, not fatal: one exporter may not handle a model
                path.unlink(missing_ok=True)
                first = (str(exc).strip().splitlines() or [""])[0]
                manifest["files"][key] = {
                    "file": None,
                    "exporter": exporter,
                    "error": f"{type(exc).__name__}: {first}",
                }
                print(f"{key}: export failed: {first}")
                continue
            manifest["files"][key] = entry(path, exporter, check_against_torch(name, path))
            print(
                f"{key}: {manifest['files'][key]['size']} bytes, ORT - torch <= {manifest['files'][key]['max_deviation_from_torch']:.2e}"
            )
    manifest["files"] = dict(sorted(manifest["files"].items()))
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
