#!/usr/bin/env python3
"""Writes the ONNX backend test cases for the operators the training engine claims.

The onnx PyPI package holds the ONNX backend node tests: one small model with inputs and expected
outputs per operator case. Some releases ship them as files (onnx/backend/test/data/node/CASE/
model.onnx + test_data_set_0/{input,output}_N.pb; onnx 1.19.1 still does), others only build them
in memory (onnx.backend.test.case.node.collect_testcases(), the generator behind
onnx.backend.test.loader.load_model_tests(kind="node")'s data). This script takes the shipped files
when there are any (--source auto), else generates the cases, and writes, in that standard layout,
every case whose graph uses only claimed operators (expanded function cases are included when
they do; those of other operators are not):

  OUT/CASE/model.onnx, OUT/CASE/test_data_set_0/input_0.pb, ..., output_0.pb, ...
  OUT/MANIFEST.json   onnx version, source, options, and per case its origin and changes

Besides the kind "node" it also takes the package's "pytorch-converted" and "pytorch-operator"
cases (opset 6; the only ones with grouped/depthwise convolutions and Conv biases), converted up
to --min-opset with onnx.version_converter. Changes made to a case are recorded in the manifest:
  - opset above --max-opset (the engine claims 7-21; the node cases of Conv, pooling, Dropout
    are at opset 22, Flatten/Reshape/Identity/Constant at 24): converted down with
    onnx.version_converter when every operator's schema at the lower opset has the same inputs,
    outputs and attributes (the newer versions only add data types); otherwise kept as is;
  - a variant CASE_const_inputs for cases with more than one graph input or with non-float
    inputs: every input but the first float one becomes an initializer (Reshape's shape,
    Clip's min/max, Conv's W/B, Dropout's ratio, ... as a CNN engine sees them in real models;
    float ones are then parameters whose gradients --gradcheck also checks).
Every changed model is run with onnxruntime and must reproduce the expected outputs
(relative 1e-4 plus absolute 1e-5) or it is left out (listed under "dropped" in the manifest).

Expected outputs that the package gives as literals rounded to 4 decimals are recomputed with
onnx.reference.ReferenceEvaluator (see unround_expected(); noted in the manifest).

Cases whose graph inputs or outputs are sequences, maps or optionals are left out (listed under
"skipped"). Non-float tensor cases (int8 Add, uint8 MaxPool, ...) are written: the engine must
reject them with ErrorKind::unsupported.

Idempotent: when OUT/MANIFEST.json records the same onnx version, options and script, it does
nothing. Otherwise OUT is rebuilt in a temporary folder beside it and swapped in.

usage: export_onnx_node_tests.py OUT_DIR [--source auto|files|generate] [--kinds node,...]
                                         [--max-opset 21] [--min-opset 7] [--no-const-variants]
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import warnings

import numpy as np
import onnx
from onnx import defs, helper, numpy_helper, version_converter

# The operators the training engine claims (lib/nn/model.h), opsets 7-21.
CLAIMED_OPS = frozenset([
    "Conv", "BatchNormalization", "Relu", "LeakyRelu", "Sigmoid", "Clip", "MaxPool", "AveragePool",
    "GlobalAveragePool", "Gemm", "MatMul", "Add", "Sub", "Mul", "Sum", "Flatten", "Reshape",
    "Concat", "Dropout", "Identity", "Softmax", "Constant", "ConstantOfShape"])

DATA_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
RTOL, ATOL = 1e-4, 1e-5
FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)


def log(msg):
    print(f"export_onnx_node_tests: {msg}", file=sys.stderr)


def default_opset(model):
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return 0


def is_tensor_io(model):
    return all(v.type.HasField("tensor_type") for v in list(model.graph.input) + list(model.graph.output))


# ---- sources -----------------------------------------------------------------------------
class Case:
    def __init__(self, name, origin, model, inputs, outputs):
        self.name, self.origin, self.model = name, origin, model
        self.inputs, self.outputs = inputs, outputs  # lists of serialized TensorProto bytes
        self.notes = []


def read_case_dir(kind, name, case_dir):
    model = onnx.load(os.path.join(case_dir, "model.onnx"))
    ds = os.path.join(case_dir, "test_data_set_0")
    if not os.path.isdir(ds):
        return None

    def read_all(prefix):
        out, i = [], 0
        while os.path.exists(os.path.join(ds, f"{prefix}_{i}.pb")):
            with open(os.path.join(ds, f"{prefix}_{i}.pb"), "rb") as f:
                out.append(f.read())
            i += 1
        return out

    return Case(name, f"{kind}/{name}", model, read_all("input"), read_all("output"))


def file_cases(kind):
    kind_dir = os.path.join(DATA_DIR, kind)
    for name in sorted(os.listdir(kind_dir)):
        case_dir = os.path.join(kind_dir, name)
        if os.path.isfile(os.path.join(case_dir, "model.onnx")):
            case = read_case_dir(kind, name, case_dir)
            if case is not None:
                yield case


def generated_node_cases():
    """The node cases built in memory, as `python -m onnx.backend.test.cmd_tools generate-data` does."""
    import onnx.backend.test.case.node as node_test

    np.random.seed(0)  # some generators draw unseeded random inputs
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # overflow warnings of generators for other operators
        collected = node_test.collect_testcases(None)
    for tc in sorted(collected, key=lambda t: t.name):
        if not is_tensor_io(tc.model):
            yield Case(tc.name, f"node/{tc.name}", tc.model, None, None)
            continue
        inputs, outputs = tc.data_sets[0]

        def ser(values, infos):
            return [(v if isinstance(v, onnx.TensorProto) else numpy_helper.from_array(np.asarray(v), vi.name))
                    .SerializeToString() for v, vi in zip(values, infos)]

        yield Case(tc.name, f"node/{tc.name}", tc.model, ser(inputs, tc.model.graph.input),
                   ser(outputs, tc.model.graph.output))


# ---- changes -----------------------------------------------------------------------------
def same_signature(op, v_new, v_old):
    """True when op's schema at opset v_old has the inputs, outputs and attributes of v_new."""
    try:
        a, b = defs.get_schema(op, v_new), defs.get_schema(op, v_old)
    except Exception:
        return False
    if a.since_version == b.since_version:
        return True
    if sorted(a.attributes) != sorted(b.attributes):
        return False
    for k, x in a.attributes.items():
        y = b.attributes[k]
        if (x.type, x.required, x.default_value.SerializeToString()) != \
           (y.type, y.required, y.default_value.SerializeToString()):
            return False
    sig = lambda s: ([(p.name, p.option) for p in s.inputs], [(p.name, p.option) for p in s.outputs])
    return sig(a) == sig(b)


def convert_opset(case, min_opset, max_opset):
    v = default_opset(case.model)
    if v > max_opset:
        ops = sorted({n.op_type for n in case.model.graph.node})
        bad = [op for op in ops if not same_signature(op, v, max_opset)]
        if bad:
            case.notes.append(f"kept at opset {v}: {','.join(bad)} differ at opset {max_opset}")
            return case
        target = max_opset
    elif v < min_opset:
        target = min_opset
    else:
        return case
    try:
        case.model = version_converter.convert_version(case.model, target)
    except Exception as e:  # noqa: BLE001 - the converter raises bare RuntimeErrors
        case.notes.append(f"kept at opset {v}: version_converter failed ({str(e).splitlines()[0]})")
        return case
    if target < v:  # the IR version that came with the lower opset (onnx.helper.VERSION_TABLE)
        ir = min((row[1] for row in helper.VERSION_TABLE if row[2] >= target), default=case.model.ir_version)
        case.model.ir_version = min(case.model.ir_version, ir)
    case.notes.append(f"opset {v} -> {target}")
    case.changed = True
    return case


def const_variant(case):
    """CASE_const_inputs: every graph input but the first float one becomes an initializer."""
    g = case.model.graph
    if len(g.input) != len(case.inputs):
        return None
    dtypes = [vi.type.tensor_type.elem_type for vi in g.input]
    if any(d not in (onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.BOOL) for d in dtypes):
        return None  # int8 Add and the like: the original case already shows the engine rejects it
    if len(g.input) < 2 and all(d in FLOAT_TYPES for d in dtypes):
        return None
    keep = next((i for i, d in enumerate(dtypes) if d in FLOAT_TYPES), None)
    if keep is not None and dtypes[keep] != onnx.TensorProto.FLOAT:
        return None
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    if model.ir_version < 4:
        model.ir_version = 4  # initializers need not be graph inputs from IR version 4
    mg = model.graph
    new_inputs, moved = [], []
    for i, vi in enumerate(g.input):
        if i == keep:
            new_inputs.append(vi)
            continue
        t = onnx.TensorProto()
        t.ParseFromString(case.inputs[i])
        t.name = vi.name
        mg.initializer.append(t)
        moved.append(vi.name)
    del mg.input[:]
    mg.input.extend(new_inputs)
    v = Case(case.name + "_const_inputs", case.origin, model,
             [case.inputs[keep]] if keep is not None else [], case.outputs)
    v.notes = list(case.notes) + [f"graph inputs {','.join(moved)} made initializers"]
    v.changed = True
    return v


def random_outputs(case):
    """True for cases whose expected outputs depend on a random mask (Dropout in training mode with
    a ratio other than 0): no other implementation can reproduce them."""
    g = case.model.graph
    values = {}
    for vi, raw in zip(g.input, case.inputs):
        t = onnx.TensorProto()
        t.ParseFromString(raw)
        values[vi.name] = numpy_helper.to_array(t)
    for t in g.initializer:
        values[t.name] = numpy_helper.to_array(t)
    for n in g.node:
        if n.op_type != "Dropout" or len(n.input) < 3 or not n.input[2]:
            continue
        training = values.get(n.input[2])
        ratio = values.get(n.input[1]) if len(n.input) > 1 and n.input[1] else np.float32(0.5)
        if training is None or ratio is None or (bool(training) and float(ratio) != 0.0):
            return True
    return False


def looks_rounded(arrays):
    """True when every expected float value has at most 4 decimals (hand-written literals)."""
    floats = [a for a in arrays if a.dtype.kind == "f" and a.size]
    return bool(floats) and all(np.allclose(a, np.round(a, 4), rtol=0, atol=1e-7) and
                                not np.allclose(a, np.round(a), rtol=0, atol=1e-7) for a in floats)


def unround_expected(case):
    """Some node cases give their expected outputs as literals rounded to 4 decimals (e.g.
    AveragePool's ceil_last_window_starts_on_pad: 0.2841 for 0.284044), finer than the
    onnx suite's own rtol 1e-3 but coarser than ours (1e-4). For such cases the outputs are
    recomputed with onnx.reference.ReferenceEvaluator, kept only when they agree with the shipped
    ones within the suite's 1e-3, and noted in the manifest."""
    outs = []
    for raw in case.outputs:
        t = onnx.TensorProto()
        t.ParseFromString(raw)
        outs.append(numpy_helper.to_array(t))
    if not looks_rounded(outs):
        return
    from onnx.reference import ReferenceEvaluator

    feeds = {}
    for vi, raw in zip(case.model.graph.input, case.inputs):
        t = onnx.TensorProto()
        t.ParseFromString(raw)
        feeds[vi.name] = numpy_helper.to_array(t)
    try:
        with np.errstate(all="ignore"):
            got = ReferenceEvaluator(case.model).run(None, feeds)
    except Exception:  # noqa: BLE001
        return
    new = []
    for vi, g, e in zip(case.model.graph.output, got, outs):
        g = np.asarray(g)
        if g.shape != e.shape or g.dtype != e.dtype:
            return
        if e.dtype.kind == "f":
            if not np.allclose(g, e, rtol=1e-3, atol=1e-7):
                return
        elif not np.array_equal(g, e):
            return
        new.append(numpy_helper.from_array(g, vi.name).SerializeToString())
    if new != case.outputs:
        case.outputs = new
        case.notes.append("expected outputs recomputed with onnx.reference "
                          "(the shipped ones are rounded to 4 decimals)")


def verify_with_ort(case, model=None):
    """None when onnxruntime reproduces the expected outputs of the (changed) model, else why not."""
    import onnxruntime as ort

    model = model or case.model
    try:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        feeds = {}
        for vi, raw in zip(model.graph.input, case.inputs):
            t = onnx.TensorProto()
            t.ParseFromString(raw)
            feeds[vi.name] = numpy_helper.to_array(t)
        got = sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001
        return f"onnxruntime cannot run it: {str(e).splitlines()[0][:200]}"
    for i, (g, raw) in enumerate(zip(got, case.outputs)):
        t = onnx.TensorProto()
        t.ParseFromString(raw)
        exp = numpy_helper.to_array(t)
        if g.shape != exp.shape:
            return f"output {i}: onnxruntime shape {g.shape}, expected {exp.shape}"
        if exp.dtype.kind in "fc":
            g64, e64 = g.astype(np.float64), exp.astype(np.float64)
            bad = ~(np.abs(g64 - e64) <= ATOL + RTOL * np.abs(e64))
            bad &= ~(np.isnan(g64) & np.isnan(e64))
            if bad.any():
                return f"output {i}: onnxruntime differs, max abs error {np.nanmax(np.abs(g64 - e64)):.3g}"
        elif not np.array_equal(g, exp):
            return f"output {i}: onnxruntime differs"
    return None


# ---- output ------------------------------------------------------------------------------
def write_case(root, case):
    d = os.path.join(root, case.name)
    ds = os.path.join(d, "test_data_set_0")
    os.makedirs(ds)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(case.model.SerializeToString())
    for prefix, items in (("input", case.inputs), ("output", case.outputs)):
        for i, raw in enumerate(items):
            with open(os.path.join(ds, f"{prefix}_{i}.pb"), "wb") as f:
                f.write(raw)


def options_key(args, source):
    with open(os.path.abspath(__file__), "rb") as f:
        script = hashlib.sha256(f.read()).hexdigest()[:16]
    return {"onnx_version": onnx.__version__, "source": source, "kinds": args.kinds,
            "max_opset": args.max_opset, "min_opset": args.min_opset,
            "const_variants": not args.no_const_variants, "script": script}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--source", choices=["auto", "files", "generate"], default="auto",
                    help="node cases from the package's files or built in memory (auto: files if shipped)")
    ap.add_argument("--kinds", default="node,pytorch-converted,pytorch-operator",
                    help="comma-separated kinds of backend test data (default: %(default)s)")
    ap.add_argument("--max-opset", type=int, default=21, help="convert newer cases down to this opset")
    ap.add_argument("--min-opset", type=int, default=7, help="convert older cases up to this opset")
    ap.add_argument("--no-const-variants", action="store_true", help="write no *_const_inputs variants")
    args = ap.parse_args()

    source = args.source
    if source == "auto":
        source = "files" if os.path.isdir(os.path.join(DATA_DIR, "node")) else "generate"
    key = options_key(args, source)
    out = os.path.abspath(args.out_dir)
    manifest_path = os.path.join(out, "MANIFEST.json")
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            old = json.load(f)
        if old.get("key") == key:
            print(f"onnx {onnx.__version__} ({source}): {len(old['cases'])} cases in {out}, up to date")
            return
    elif os.path.isdir(out) and os.listdir(out):
        sys.exit(f"export_onnx_node_tests: {out} is not empty and has no MANIFEST.json; refusing to replace it")

    cases, skipped, dropped = [], {}, {}
    kinds = [k for k in args.kinds.split(",") if k]
    for kind in kinds:
        if kind == "node" and source == "generate":
            it = generated_node_cases()
        else:
            if not os.path.isdir(os.path.join(DATA_DIR, kind)):
                if kind == "node":
                    sys.exit(f"export_onnx_node_tests: onnx {onnx.__version__} ships no {kind} files; "
                             "use --source generate")
                log(f"onnx {onnx.__version__} has no '{kind}' test data; skipped")
                continue
            it = file_cases(kind)
        for case in it:
            ops = {n.op_type for n in case.model.graph.node}
            if not ops <= CLAIMED_OPS:
                continue
            if kind != "node":
                case.name = f"{kind.replace('-', '_')}_{case.name}"
            if not is_tensor_io(case.model) or case.inputs is None:
                skipped[case.name] = "sequence, map or optional graph inputs/outputs"
                continue
            if random_outputs(case):
                skipped[case.name] = "expected outputs depend on a random Dropout mask"
                continue
            case.changed = False
            unround_expected(case)
            original = onnx.ModelProto()
            original.CopyFrom(case.model)
            original_inputs = case.inputs
            case = convert_opset(case, args.min_opset, args.max_opset)
            variants = [case]
            if not args.no_const_variants:
                v = const_variant(case)
                if v is not None:
                    variants.append(v)
            for c in variants:
                if c.changed:
                    why = verify_with_ort(c)
                    if why:
                        # onnxruntime may differ from the reference outputs on the original model
                        # too (then the change is not to blame): keep the case, with a note.
                        c0 = Case(c.name, c.origin, original, original_inputs, c.outputs)
                        why0 = verify_with_ort(c0)
                        if why0 is None or why0.startswith("onnxruntime cannot run"):
                            dropped[c.name] = "; ".join(c.notes + [why])
                            continue
                        c.notes.append(f"onnxruntime also misses the expected outputs before the change ({why0})")
                cases.append(c)

    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(out) + ".tmp-", dir=parent)
    try:
        for c in cases:
            write_case(tmp, c)
        manifest = {
            "key": key,
            "onnx_version": onnx.__version__,
            "source": source,
            "claimed_ops": sorted(CLAIMED_OPS),
            "cases": {c.name: {"origin": c.origin, "opset": default_opset(c.model), "changes": c.notes}
                      for c in cases},
            "skipped": skipped,
            "dropped": dropped,
        }
        with open(os.path.join(tmp, "MANIFEST.json"), "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
        if os.path.isdir(out):
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    n_var = sum(1 for c in cases if c.name.endswith("_const_inputs"))
    n_conv = sum(1 for c in cases if any(n.startswith("opset") for n in c.notes))
    print(f"onnx {onnx.__version__} ({source}, kinds {','.join(kinds)}): wrote {len(cases)} cases to {out} "
          f"({n_var} *_const_inputs variants, {n_conv} converted to opsets {args.min_opset}-{args.max_opset}); "
          f"{len(skipped)} skipped, {len(dropped)} dropped")
    for name, why in sorted(dropped.items()):
        log(f"dropped {name}: {why}")


if __name__ == "__main__":
    main()
