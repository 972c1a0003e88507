"""The one ONNX graph builder of the example, test and fixture models (numpy + onnx; no PyTorch):
scripts/make_train_models.py (the models configs/ trains), tests/fixtures/make_model_cases.py (the
conformance model cases), tests/cli/hpcnn_test.py (the CLI tests' small CNNs). Each keeps its own
layers (how it draws weights, how it names values) on top of GraphBuilder, which holds the graph:
unique names, initializers, nodes, and the checked ModelProto.

The benchmark's models (bench/bench_models.py) are defined in PyTorch instead: the benchmark compares
our training with PyTorch's on the same network, so PyTorch's side must be a native PyTorch module
(an ONNX-to-PyTorch conversion would time the converter's modules, not what a PyTorch user runs).
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class GraphBuilder:
    """Nodes and initializers of one graph. `rng`: a numpy Generator, or made from `seed`."""

    def __init__(self, rng=None, seed=0):
        self.rng = rng if rng is not None else np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, prefix, sep=""):
        """A fresh name: prefix, sep and a counter shared by every name of the graph."""
        self.n += 1
        return f"{prefix}{sep}{self.n}"

    def init(self, name, array):
        """An initializer named `name` holding `array` (its dtype kept)."""
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def constant(self, name, array):
        """A Constant node (not an initializer) whose output is `name`."""
        self.nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name)))
        return name

    def add_node(self, op, inputs, outputs, name=None, **attrs):
        self.nodes.append(helper.make_node(op, list(inputs), list(outputs), name=name, **attrs))
        return outputs[0] if len(outputs) == 1 else list(outputs)

    def build(self, inputs, outputs, opset, ir_version=None, graph_name="g", producer=None, inits_as_inputs=False,
              infer_outputs=False, strict_inference=False, full_check=False):
        """The checked model. inputs/outputs: (name, shape) pairs (shape None: unknown); with
        infer_outputs, each output's type and shape come from onnx's shape inference (strict:
        inference errors raise). ir_version None: the oldest IR version that knows `opset`.
        inits_as_inputs: initializers listed as graph inputs too (IR version 3)."""
        graph = helper.make_graph(self.nodes, graph_name,
                                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                                  initializer=self.inits)
        if inits_as_inputs:
            graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in self.inits)
        if ir_version is None:
            ir_version = min(r[1] for r in helper.VERSION_TABLE if r[2] >= opset)
        kw = {"producer_name": producer} if producer is not None else {}
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kw)
        model.ir_version = ir_version
        if infer_outputs:
            inferred = onnx.shape_inference.infer_shapes(model, check_type=strict_inference, strict_mode=strict_inference)
            shapes = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
            for vi in model.graph.output:
                vi.CopyFrom(shapes[vi.name])
        onnx.checker.check_model(model, full_check=full_check)
        return model
