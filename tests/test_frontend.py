"""ig.function tracing and caching, export naming, TensorSpec, Session, and call-time errors."""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes


def test_one_trace_per_input_signature():
    calls = []

    @ig.function
    def f(x, scale):
        calls.append(1)
        return x * scale

    f(np.ones(3, np.float32), 2.0)
    f(np.zeros(3, np.float32), 2.0)          # same signature: cached
    assert len(calls) == 1 and f.trace_count == 1
    f(np.ones(4, np.float32), 2.0)           # new shape
    f(np.ones(3, np.float64), 2.0)           # new dtype
    out = f(np.ones(3, np.float32), 3.0)     # Python scalars are static values (tf.function's rule)
    assert f.trace_count == 4 and len(calls) == 4
    np.testing.assert_array_equal(out, [3.0, 3.0, 3.0])


def test_outputs_mirror_the_python_structure():
    @ig.function
    def f(x):
        return {"sum": ig.reduce_sum(x), "parts": (x * 2.0, [x + 1.0, None]), "const": 3}

    out = f(np.array([1.0, 2.0], np.float32))
    assert set(out) == {"sum", "parts", "const"}
    assert isinstance(out["parts"], tuple) and isinstance(out["parts"][1], list)
    assert out["parts"][1][1] is None
    assert float(out["sum"]) == 3.0 and int(out["const"]) == 3
    np.testing.assert_array_equal(out["parts"][0], [2.0, 4.0])


def test_input_signature_checks_calls():
    f = ig.function(lambda x: x * 2.0, input_signature=[ig.TensorSpec([2, 3], ig.float32)])
    np.testing.assert_array_equal(f([[1, 2, 3], [4, 5, 6]]), [[2, 4, 6], [8, 10, 12]])
    with pytest.raises(ValueError, match=r"shape \(3, 2\).*\(2, 3\)"):
        f(np.ones((3, 2), np.float32))
    with pytest.raises(TypeError, match="float64.*float32"):
        f(np.ones((2, 3), np.float64))
    with pytest.raises(TypeError, match="too many positional arguments"):
        f(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))


def test_export_names_the_public_function_after_the_python_function():
    def double(x):
        return x * 2.0

    text = ig.export(double, ig.TensorSpec([3]))
    module = passes.parse_module(text)
    assert [passes.function_name(f) for f in passes.public_functions(module)] == ["double"]
    renamed = ig.export(double, ig.TensorSpec([3]), name="twice")
    assert "func.func @twice(" in renamed and "@double" not in renamed


def test_lowered_mlir_is_pure_stablehlo_with_op_names_as_locations():
    @ig.function
    def f(x):
        return ig.sin(x, name="my_sine") + ig.stop_gradient(x)

    lowered = f.lower(ig.TensorSpec([2]))
    module = passes.parse_module(lowered.mlir)
    passes.verify(module)
    assert 'loc("my_sine")' in lowered.mlir
    dialects = {line.split("=", 1)[-1].split()[0].split(".")[0].strip('"')
                for line in lowered.mlir.splitlines() if "= stablehlo." in line or "= chlo." in line}
    assert dialects <= {"stablehlo", "chlo"}
    artifact = lowered.compile(target="llvm-cpu")
    assert artifact.target == "llvm-cpu" and "f" in artifact.functions


def test_tensor_properties_and_op_types():
    with ig.Graph().as_default():
        x = ig.placeholder(ig.float32, [2, 3], name="x")
        y = ig.sin(x)
        assert y.op.type == "stablehlo.sine" and ig.tanh(x).op.type == "stablehlo.tanh"
        assert y.shape == [2, 3] and y.dtype == ig.float32 and y.name == "sin:0"
        assert y.op.inputs[0] is not None and y.op.inputs[0].name == "x:0"
        assert x.op.type == "Placeholder"
        t = ig.transpose(x)
        assert t.op.get_attr("permutation") == [1, 0]


def test_shape_and_dtype_errors_at_trace_time():
    with ig.Graph().as_default():
        a = ig.placeholder(ig.float32, [2, 3])
        b = ig.placeholder(ig.float32, [4])
        with pytest.raises(ValueError, match=r"add.*\(2, 3\).*\(4,\)"):
            ig.add(a, b)
        with pytest.raises(TypeError, match="float32.*float64"):
            a + ig.placeholder(ig.float64, [2, 3])
        with pytest.raises(TypeError):
            ig.placeholder(ig.int32, [2]) + 2.5


def test_unknown_target_and_bad_flags_list_allowed_values():
    with pytest.raises(ValueError, match="llvm-cpu"):
        ig.function(lambda x: x, target="tpu")
    with pytest.raises(ValueError, match="llvm-cpu"):
        ig.compile("func.func @f() { return }", target="metal")
    with pytest.raises(ValueError, match="sm_"):
        ig.compile("func.func @f() { return }", target="cuda", cuda_arch="volta")


def test_malformed_mlir_is_a_clear_error():
    with pytest.raises(ValueError, match="invalid MLIR"):
        passes.differentiate("func.func @f(%x: tensor<2xf32>) { return %y }")
    with pytest.raises(ValueError):
        ig.compile("this is not mlir")


def test_session_compiles_the_fetched_subgraph_once():
    with ig.Graph().as_default():
        x = ig.placeholder(ig.float32, [2], name="x")
        unused = ig.placeholder(ig.float32, [5], name="unused")
        y = x * 3.0
        z = unused * 2.0
        with ig.Session() as sess:
            for value in ([1.0, 2.0], [3.0, 4.0]):
                np.testing.assert_array_equal(sess.run(y, {x: np.array(value, np.float32)}), np.array(value) * 3)
            assert len(sess._cache) == 1
            a, b = sess.run([y, y + 1.0], feed_dict={x: np.ones(2, np.float32)})
            np.testing.assert_array_equal(b, [4.0, 4.0])
            with pytest.raises(ValueError, match="must feed a value for placeholder tensor 'unused'"):
                sess.run(z)
            with pytest.raises(ValueError, match="shape"):
                sess.run(y, {x: np.ones(3, np.float32)})
    with pytest.raises(RuntimeError, match="closed"):
        sess.run(y, {x: np.ones(2, np.float32)})


def test_session_needs_a_graph():
    with pytest.raises(RuntimeError, match="Graph"):
        ig.Session()
    with pytest.raises(RuntimeError, match="ig.function"):
        ig.get_default_graph()
    with pytest.raises(RuntimeError, match="ig.function"):
        ig.placeholder(ig.float32, [2])


def test_load_picks_the_artifacts_device(tmp_path):
    artifact = ig.compile(ig.export(lambda x: x + 1.0, ig.TensorSpec([2]), name="inc"), target="vmvx")
    path = artifact.save(tmp_path / "inc.vmfb")
    module = ig.load(path)
    assert module.device == "local-task" and module.target == "vmvx"
    assert "inc" in module.functions
    np.testing.assert_array_equal(module["inc"](np.zeros(2, np.float32)), [1.0, 1.0])
    with pytest.raises(KeyError, match="inc"):
        module["dec"]


def test_session_with_variables_reads_and_assigns():
    v = ig.Variable(np.array([1.0, 2.0], np.float32))
    with ig.Graph().as_default():
        x = ig.placeholder(ig.float32, [2], name="x")
        y = x * v
        grad = ig.gradients(ig.reduce_sum(y), v)[0]
        update = v.assign_add(x)
        with ig.Session() as sess:
            out, g = sess.run([y, grad], {x: np.array([3.0, 4.0], np.float32)})
            np.testing.assert_array_equal(out, [3.0, 8.0])
            np.testing.assert_array_equal(g, [3.0, 4.0])
            sess.run(update, {x: np.array([10.0, 10.0], np.float32)})
            np.testing.assert_array_equal(v.numpy(), [11.0, 12.0])
            np.testing.assert_array_equal(sess.run(y, {x: np.ones(2, np.float32)}), [11.0, 12.0])


def test_equality_operators_are_elementwise_as_tensorflow_2():
    @ig.function
    def f(x, y):
        assert (x == None) is False and (x != None) is True  # noqa: E711
        same = ig.sin(x)
        assert same.op.outputs[0] is same and [same] == same.op.outputs  # one object per tensor
        return x == y, x != 2.0, ig.where(x == 0.0, 10.0, x)

    eq, ne, w = f(np.array([0.0, 2.0, 3.0], np.float32), np.array([0.0, 1.0, 3.0], np.float32))
    np.testing.assert_array_equal(eq, [True, False, True])
    np.testing.assert_array_equal(ne, [True, False, True])
    np.testing.assert_array_equal(w, [10.0, 2.0, 3.0])
