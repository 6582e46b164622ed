"""Campaign BU 4–6: a batch norm forward whose `training` flag PyTorch 1.9 did not record takes its
mode from its cuDNN / MIOpen kernel's name; native_layer_norm_backward does not read its bias;
copies and fills carry their data's precision (or none) and the memory-bandwidth label they are
held against. Every expected number is worked out by hand in the comments beside it (fp32 4 B)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from kernel_atlas.core.devices import load_devices
from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.costs import Call, cost_of
from tests.support.traces import ingested, trace_path

FP32 = "float"


@pytest.fixture(scope="module")
def v100_roofline() -> pd.DataFrame:
    trace_path("v100_resnet50_train_pt19")
    from kernel_atlas.roofline.analysis import analyse

    # the trace names a "Tesla V100-DGXS-32GB", which the catalog does not match: held against V100 SXM2
    return analyse(ingested("v100_resnet50_train_pt19").frame, load_devices()["v100"]).roofline


# --- 4. cuDNN's bn_fw_tr_ kernels say training ------------------------------------------------------


def test_cudnn_batch_norm_training_read_from_the_kernel_name(v100_roofline) -> None:
    rows = v100_roofline[
        (v100_roofline["launcher"] == "aten::cudnn_batch_norm")
        & (v100_roofline["input_dims"] == "[[32,256,56,56],[256],[256],[256],[256],[],[],[]]")
    ]
    assert len(rows) >= 1
    assert rows["name"].str.contains("bn_fw_tr_").all()  # PyTorch 1.9: no Concrete Inputs, training not recorded
    # x 32·256·56·56 = 25,690,112 elements · 4 = 102,760,448 read, y 102,760,448 written; weight, bias,
    # running_mean, running_var 4·256·4 = 4,096 read; saved mean and invstd 2·256·4 = 2,048 written;
    # running mean/var written back 2·256·4 = 2,048 → 205,529,088 (had been 205,524,992, an estimate)
    assert (rows["bytes"] == 205_529_088).all()
    assert not rows["estimate"].any()
    assert rows["formula"].str.contains("kernel's name bn_fw_tr_", regex=False).all()
    assert not rows["formula"].str.contains("not recorded").any()


def _batch_norm(launcher: str, training: str) -> tuple:
    # (x [8,16,32,32] fp32, None, None, running_mean [16], running_var [16], training, 0.1, 1e-5)
    x = [8, 16, 32, 32]
    dims = json.dumps([x, [], [], [16], [16], [], [], []])
    types = json.dumps([FP32, "", "", FP32, FP32, "Bool", "Double", "Double"])
    concrete = json.dumps(["", "", "", "", "", training, "0.1", "1e-05"]) if training else None
    return launcher, parse_call(dims, types, None, concrete)


def test_the_kernel_name_decides_only_where_the_flag_is_not_recorded() -> None:
    from kernel_atlas.roofline.costs.pointwise import with_kernel_mode

    def cost(launcher: str, training: str, kernel: str):
        launcher, args = _batch_norm(launcher, training)
        return cost_of(Call(launcher, "batch_norm", with_kernel_mode(launcher, args, kernel)))

    # read x 524,288 + running stats 64 + 64, y 524,288 written = 1,048,704; training also writes
    # save_mean + save_invstd 2·16·4 = 128 and the running stats back 128 → 1,048,960
    inference = cost("aten::cudnn_batch_norm", "", "void cudnn::bn_fw_inf_1C11_kernel_NCHW<float, float, true, 1>(…)")
    assert inference.bytes == 1_048_704 and "kernel's name bn_fw_inf_" in inference.formula
    trained = cost("aten::miopen_batch_norm", "", "MIOpenBatchNormFwdTrainSpatial")
    assert trained.bytes == 1_048_960 and "kernel's name MIOpenBatchNormFwdTrain" in trained.formula
    assert cost("aten::miopen_batch_norm", "", "MIOpenBatchNormFwdInferSpatialEst").bytes == 1_048_704
    # a recorded flag wins; a name that says nothing leaves the mode not recorded (an estimate, said)
    assert cost("aten::cudnn_batch_norm", "False", "cudnn::bn_fw_tr_1C11_singleread").bytes == 1_048_704
    unknown = cost("aten::native_batch_norm", "", "batch_norm_transform_input_kernel")
    assert unknown.bytes == 1_048_704 and "training not recorded" in unknown.formula


# --- 5. native_layer_norm_backward does not read its bias -------------------------------------------


def test_layer_norm_backward_reads_no_bias() -> None:
    trace_path("mi300x_normalization_layers")
    from kernel_atlas.roofline.analysis import analyse

    table = analyse(ingested("mi300x_normalization_layers").frame, load_devices()["mi300x"]).roofline
    row = table[
        (table["launcher"] == "aten::native_layer_norm_backward")
        & (table["role"] == "main")  # its GammaBeta kernel is a helper
        & (table["input_dims"] == "[[8,16,32,32],[8,16,32,32],[],[8,1,1,1],[8,1,1,1],[16,32,32],[16,32,32],[]]")
    ]
    assert len(row) == 1
    # read: dY 8·16·32·32·4 = 524,288 + X 524,288 + mean 8·4 = 32 + rstd 32 + weight 16·32·32·4 = 65,536
    # = 1,114,176 (the bias only sizes grad_bias); written: dX 524,288 + dW 65,536 + db 65,536 = 655,360
    # → 1,769,536 (had been 1,835,072)
    assert row["bytes"].iat[0] == 1_769_536
    assert "inputs 1114176" in row["formula"].iat[0]
    # 1,769,536 B / 5,300 GB/s = 0.33387 µs attainable
    assert math.isclose(row["attainable_us"].iat[0], 1_769_536 / 5300e3, rel_tol=1e-9)


# --- 6. copies and fills: the data's precision, a bandwidth label ----------------------------------


def test_memsets_and_copies_carry_no_integer_math(v100_roofline) -> None:
    table = v100_roofline
    memsets = table[table["name"] == "Memset (Device)"]
    assert len(memsets) >= 1
    # a workspace memset under cudnn_convolution_backward_weight: no dtype recorded, no precision
    assert memsets["precision"].isna().all()
    assert (memsets["peak_label"] == "memory bandwidth").all()
    copies_and_fills = table[table["name"].str.startswith(("Memset", "Memcpy"))]
    assert not copies_and_fills["peak_label"].astype(str).str.contains("integer math").any()
    # 1,048,576 B written in 1.167 µs against 900 GB/s: 1,048,576 / 900e3 = 1.16508 µs, 99.84–99.87 %, memory
    big = memsets[memsets["bytes"] == 1_048_576]
    assert len(big) >= 1
    assert (big["peak_gbps"] == 900).all() and (big["bound"] == "memory").all()
    assert big["sol_pct"].between(99.8, 99.9).any()  # the 1.167 µs one (another ran in 1.133 µs: 102.8 %)
    # a host copy under aten::copy_ of float tensors ["float","float","Bool"]: fp32, host bandwidth
    copies = table[table["name"].str.startswith("Memcpy HtoD") & (table["input_types"] == '["float","float","Bool"]')]
    assert len(copies) >= 1
    assert (copies["precision"] == "fp32").all() and (copies["peak_label"] == "host bandwidth").all()


def test_a_rocm_host_copy_takes_its_tensors_precision() -> None:
    trace_path("mi250_minitoy_train")
    from kernel_atlas.roofline.analysis import analyse

    table = analyse(ingested("mi250_minitoy_train").frame, None).roofline
    copies = table[table["name"].str.startswith("Memcpy HtoD")]
    assert len(copies) >= 1
    # launched by aten::copy_ of ["float","float","Bool"]: fp32 (had been "int")
    assert (copies["precision"] == "fp32").all()
