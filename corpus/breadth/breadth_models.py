"""The breadth slice's models: every ``transformers`` model class built from its own configuration class, shrunk
to a tiny width, with random weights (no download), and the inputs its ``forward`` takes.

``shrink`` is generic: it lowers the sizes every configuration names alike (hidden size, layers, heads,
intermediate size, vocabulary, positions, image and patch sizes), in nested sub-configurations too, keeping
what must divide (heads into the hidden size); ``OVERRIDES`` holds what a family needs beyond that. ``inputs``
builds what ``main_input_name`` says the model reads: token ids with a right-padded mask, pixel values, audio
features or raw audio, and declares the dynamic axes such a model has (batch, sequence, image height/width where
the model takes any).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import torch
from torch.export import Dim

VOCAB = 256
WIDTH, HEADS, LAYERS = 32, 2, 2

# every configuration attribute of this name (at any depth) takes this value, where it has one
SIZES: dict[str, Any] = {
    "hidden_size": WIDTH, "d_model": WIDTH, "n_embd": WIDTH, "embed_dim": WIDTH, "dim": WIDTH, "n_embed": WIDTH,
    "d_embed": WIDTH, "projection_dim": WIDTH, "text_embed_dim": WIDTH, "vision_embed_dim": WIDTH,
    "num_hidden_layers": LAYERS, "n_layer": LAYERS, "n_layers": LAYERS, "num_layers": LAYERS,
    "encoder_layers": LAYERS, "decoder_layers": LAYERS, "num_decoder_layers": LAYERS, "num_encoder_layers": LAYERS,
    "num_attention_heads": HEADS, "n_head": HEADS, "n_heads": HEADS, "num_heads": HEADS,
    "encoder_attention_heads": HEADS, "decoder_attention_heads": HEADS, "num_key_value_heads": HEADS,
    "intermediate_size": 2 * WIDTH, "ffn_dim": 2 * WIDTH, "encoder_ffn_dim": 2 * WIDTH, "decoder_ffn_dim": 2 * WIDTH,
    "n_inner": 2 * WIDTH, "hidden_dim": 2 * WIDTH, "d_ff": 2 * WIDTH, "d_kv": WIDTH // HEADS,
    "head_dim": WIDTH // HEADS, "moe_intermediate_size": WIDTH, "shared_expert_intermediate_size": WIDTH,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "vocab_size": VOCAB, "max_position_embeddings": 512, "n_positions": 512, "max_seq_len": 512,
    "image_size": 32, "patch_size": 8, "num_channels": 3,
}
# lists of per-stage sizes (vision backbones): one value per stage, shrunk
STAGE_LISTS = {"hidden_sizes": 16, "embed_dims": 16, "depths": 1, "num_heads": 1}


def _shrink_one(config: Any) -> None:
    # special token ids past the shrunk vocabulary move to its top (token ids drawn stay below them: ``_ids``)
    top = VOCAB - 1
    for key in sorted(vars(config)):
        value = getattr(config, key, None)
        if key.endswith("token_id") and isinstance(value, int) and not isinstance(value, bool) and value >= VOCAB:
            try:
                setattr(config, key, 0 if key == "pad_token_id" else top)
                top -= 1
            except (AttributeError, TypeError, ValueError):
                pass
    for key, value in SIZES.items():
        if isinstance(getattr(config, key, None), int) and not isinstance(getattr(config, key), bool):
            try:
                setattr(config, key, value)
            except (AttributeError, TypeError, ValueError):
                pass
    for key, unit in STAGE_LISTS.items():
        old = getattr(config, key, None)
        if isinstance(old, (list, tuple)) and old and all(isinstance(v, int) for v in old):
            setattr(config, key, [unit * (2 ** i if unit > 1 else 1) for i in range(len(old))])


def _configs(config: Any) -> list[Any]:
    """``config`` and its sub-configurations, at any depth."""
    out, todo = [], [config]
    while todo:
        each = todo.pop()
        if any(each is seen for seen in out):
            continue
        out.append(each)
        todo += [sub for sub in vars(each).values() if hasattr(sub, "to_dict") and hasattr(sub, "model_type")]
    return out


def shrink(config: Any) -> Any:
    """``config`` at a tiny width, its sub-configurations too."""
    _shrink_one(config)
    for name in list(vars(config)):
        sub = getattr(config, name, None)
        if hasattr(sub, "to_dict") and hasattr(sub, "model_type") and sub is not config:
            shrink(sub)
    return config


@dataclasses.dataclass
class Arch:
    """One architecture: its model type, model class name and what it reads."""

    model_type: str
    class_name: str
    reads: str  # "text", "image", "audio-features", "audio-values", or "other"
    seq2seq: bool = False  # an encoder-decoder: its decoder reads ``decoder_input_ids`` too
    hw: bool = False  # an image model that runs at other heights and widths than its configuration's image size
    # forward's ``**kwargs`` name and the inputs the slice passes that only it takes (FNet's ``attention_mask``):
    # torch's dynamic_shapes nest those under that name, as its top-level keys are forward's argument names
    var_keyword: str = ""
    keyword_inputs: list[str] = dataclasses.field(default_factory=list)


def through_var_keyword(cls: Any, inputs: list[str]) -> tuple[str, list[str]]:
    """The name of ``cls.forward``'s ``**kwargs`` and which of ``inputs`` only it takes (``("", [])``: none)."""
    import inspect

    params = inspect.signature(cls.forward).parameters
    var = next((n for n, p in params.items() if p.kind is inspect.Parameter.VAR_KEYWORD), "")
    return (var, [n for n in inputs if n not in params]) if var and not set(inputs) <= set(params) else ("", [])


READS = {"input_ids": "text", "pixel_values": "image", "input_features": "audio-features",
         "input_values": "audio-values"}


def architectures() -> list[Arch]:
    """Every model type of ``transformers``' base-model mapping, with the input its class reads."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    out = []
    for model_type, names in sorted(MODEL_MAPPING_NAMES.items()):
        name = names[0] if isinstance(names, (list, tuple)) else names
        try:
            cls = getattr(transformers, name)
            reads = READS.get(getattr(cls, "main_input_name", ""), "other")
        except Exception:  # noqa: BLE001 - a class whose module needs a package not installed
            reads = "unimportable"
        out.append(Arch(model_type, name, reads))
    return out


BATCH = Dim("batch", min=1, max=8)
SEQ = Dim("seq", min=2, max=64)
# image height and width of a model that takes any (``Arch.hw``): 64 to 128 pixels in steps of 32, each on its own,
# so that a stride-32 backbone never sees a 1x1 feature map; the example is 64x64
STRIDE, KH, KW = 32, Dim("kh", min=2, max=4), Dim("kw", min=2, max=4)
HW_SIZES = ((64, 64), (96, 128), (128, 96))  # the listing runs these eagerly before it declares H and W dynamic


def build(arch: Arch) -> tuple[torch.nn.Module, Any]:
    """The model (eval, random weights, seeded) and its shrunk configuration."""
    import transformers
    from transformers import AutoConfig

    torch.manual_seed(0)
    config = shrink(AutoConfig.for_model(arch.model_type))
    for each in _configs(config):  # a prefill, as a deployment exports it: no KV cache in or out of the program,
        if hasattr(each, "use_cache"):  # the text sub-configuration of a composite model too
            each.use_cache = False
    for key in ("attn_implementation", "_attn_implementation"):
        try:
            setattr(config, key, "eager")
        except (AttributeError, TypeError, ValueError):
            pass
    model = getattr(transformers, arch.class_name)._from_config(config)
    return model.eval(), config


def _ids(batch: int, seq: int, vocab: int) -> dict[str, torch.Tensor]:
    """Token ids inside the vocabulary (above the usual special ids) and a right-padded mask, every row keeping at
    least one token, the first all of them."""
    lengths = torch.randint(1, seq + 1, (batch,))
    lengths[0] = seq
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    return {"input_ids": torch.randint(3, max(vocab - 16, 4), (batch, seq)), "attention_mask": mask}


def example(arch: Arch, config: Any) -> dict[str, torch.Tensor]:
    """The example inputs for what ``arch`` reads (batch 2; 16 tokens, the configuration's image size, its audio
    frames, 1,600 samples)."""
    torch.manual_seed(1)
    if arch.reads == "text":
        out = _ids(2, 16, min(getattr(config, "vocab_size", None) or VOCAB, VOCAB))
        if getattr(config, "is_encoder_decoder", False):  # the decoder reads the same ids (teacher forcing)
            out["decoder_input_ids"] = out["input_ids"].clone()
        return out
    if arch.reads == "image":
        return {"pixel_values": _pixels(config, *(HW_SIZES[0] if arch.hw else (_image_size(config),) * 2))}
    if arch.reads == "audio-features":
        mels = getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", None) or 80
        frames = 2 * (getattr(config, "max_source_positions", None) or 1500)
        return {"input_features": torch.randn(2, mels, frames)}
    return {"input_values": torch.randn(2, 1600)}


def shapes(arch: Arch) -> dict[str, Any]:
    """The dynamic axes declared for what ``arch`` reads, in torch's form (an input only ``**kwargs`` takes is
    nested under that name)."""
    if arch.reads == "text":
        spec = {"input_ids": {0: BATCH, 1: SEQ}, "attention_mask": {0: BATCH, 1: SEQ}}
        if arch.seq2seq:
            spec["decoder_input_ids"] = {0: BATCH, 1: SEQ}
    elif arch.reads == "audio-values":
        spec = {"input_values": {0: BATCH, 1: SAMPLES}}
    elif arch.reads == "image" and arch.hw:
        spec = {"pixel_values": {0: BATCH, 2: STRIDE * KH, 3: STRIDE * KW}}
    else:
        spec = {("pixel_values" if arch.reads == "image" else "input_features"): {0: BATCH}}
    if arch.var_keyword and arch.keyword_inputs:
        nested = {name: spec.pop(name) for name in arch.keyword_inputs if name in spec}
        spec[arch.var_keyword] = nested
    return spec


def _image_size(config: Any) -> int:
    size = getattr(config, "image_size", 32)
    return size if isinstance(size, int) else 32


def _pixels(config: Any, height: int, width: int) -> torch.Tensor:
    return torch.randn(2, getattr(config, "num_channels", 3) or 3, height, width)


def takes_any_size(model: torch.nn.Module, config: Any) -> bool:
    """Whether an image model runs eagerly at each of ``HW_SIZES`` (its height and width are then declared)."""
    try:
        with torch.no_grad():
            for height, width in HW_SIZES:
                model(pixel_values=_pixels(config, height, width))
        return True
    except Exception:  # noqa: BLE001 - a model with a fixed image size (position embeddings, window partitions)
        return False


def builder(arch: Arch):
    """``input_builder``: token ids stay inside the example's vocabulary and masks stay right-padded; other inputs
    are drawn like the example's (None: the harness's own)."""
    if arch.reads != "text":
        return None

    def build(sizes: dict[str, int], args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        out = _ids(sizes["batch"], sizes["seq"], int(kwargs["input_ids"].max()) + 17)
        if "decoder_input_ids" in kwargs:
            out["decoder_input_ids"] = out["input_ids"].clone()
        return (), out

    return build


def listing(path: str) -> None:
    """Write ``architectures.json``: every architecture that builds at tiny width and runs eagerly on its example,
    with what it reads, the CI sample, and those that do not (with why)."""
    import json
    import sys
    import warnings

    warnings.filterwarnings("ignore")
    built, skipped = [], {}
    for arch in architectures():
        if arch.reads not in ("text", "image", "audio-features", "audio-values"):
            skipped[arch.model_type] = f"reads {arch.reads}"
            continue
        try:
            model, config = build(arch)
            arch.seq2seq = bool(getattr(config, "is_encoder_decoder", False)) and arch.reads == "text"
            arch.hw = arch.reads == "image" and takes_any_size(model, config)
            arch.var_keyword, arch.keyword_inputs = through_var_keyword(type(model), list(shapes(arch)))
            with torch.no_grad():
                model(**example(arch, config))
            built.append(dataclasses.asdict(arch))
        except Exception as exc:  # noqa: BLE001 - recorded: it is not in the slice
            skipped[arch.model_type] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        print(arch.model_type, "built" if built and built[-1]["model_type"] == arch.model_type else "skipped",
              file=sys.stderr)
    names = [a["model_type"] for a in built]
    sample = sorted(sorted(names, key=lambda n: hashlib.sha256(n.encode()).hexdigest())[:CI_SAMPLE])
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"architectures": built, "ci_sample": sample, "not_built": skipped}, f, indent=1, sort_keys=True)
        f.write("\n")


CI_SAMPLE = 12  # architectures a run of the corpus keeps (a fixed pick by the hash of their names)
SAMPLES = Dim("samples", min=800, max=3200)

def minor(version: str) -> str:
    """A torch version's key in ``expected.json``: ``2.14.1+cu130`` -> ``2.14``."""
    return ".".join(str(version).split("+")[0].split(".")[:2])


def expected_failures() -> dict[str, dict[str, str]]:
    """The installed torch's entries of ``expected.json``: case id -> stage -> the first line of why."""
    import json
    from pathlib import Path

    text = (Path(__file__).resolve().parent / "expected.json").read_text(encoding="utf-8")
    return json.loads(text).get(minor(torch.__version__), {})


def expect(reports: list[str], path: str) -> None:
    """Write ``expected.json`` from whole-slice reports: per version, each case's failed stages with the first line
    of why (a case in a later report of a version replaces an earlier one's: a re-run of some cases); the versions
    no report is of are kept."""
    import json
    from pathlib import Path

    out = json.loads(Path(path).read_text(encoding="utf-8")) if Path(path).exists() else {}
    latest: dict[str, dict[str, dict]] = {}  # per version, per case: a later report's case replaces an earlier one
    for report in reports:
        data = json.loads(Path(report).read_text(encoding="utf-8"))
        version = minor(data["torch"])
        latest.setdefault(version, {}).update({case["nodeid"]: case for case in data["cases"]})
    for version, cases in latest.items():
        entries = {}
        for case in cases.values():
            failed = {name: _first_line(st.get("message", "")) for name, st in case.get("stages", {}).items()
                      if st.get("status") in ("failed", "xfailed")}
            if failed:
                entries[case["nodeid"].rsplit("[", 1)[-1].rstrip("]")] = failed
        out[version] = dict(sorted(entries.items()))
    Path(path).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def _first_line(message: str) -> str:
    from pytest_export.report.conformance import found_message

    line = next((ln.strip() for ln in found_message(message).splitlines() if ln.strip()), "failed")
    return line[:160]


if __name__ == "__main__":
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    if sys.argv[1:2] == ["--list"]:
        listing(sys.argv[2] if len(sys.argv) > 2 else str(here / "architectures.json"))
    elif sys.argv[1:2] == ["--expect"] and len(sys.argv) > 2:
        expect(sys.argv[2:], str(here / "expected.json"))
    else:
        raise SystemExit("usage: python corpus/breadth/breadth_models.py --list [PATH] | --expect REPORT...")
