"""Kernel names short enough to read in findings, axes and report tables."""

from __future__ import annotations

from gpulens.analysis.names import short_kernel_name, unique_short_names

# PyTorch's fused Adam step on an H100 (sample_traces/h100-training).
FUSED_ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
    "(at::native::ADAM_MODE)1, false>, float const*, double, double, double, double, double, bool, float const*, "
    "float const*>(at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous "
    "namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float const*, double, double, "
    "double, double, double, bool, float const*, float const*)"
)
COPY = (
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
    "{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, "
    "4, TrivialOffsetCalculator<1, unsigned int>>(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
    "{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)"
)


def test_a_templated_kernel_reads_as_its_function() -> None:
    assert short_kernel_name(FUSED_ADAM) == "at::native::multi_tensor_apply_kernel"


def test_lambdas_inside_template_arguments_go_with_them() -> None:
    assert short_kernel_name(COPY) == "at::native::unrolled_elementwise_kernel"


def test_a_name_that_fits_is_kept_as_it_is() -> None:
    assert short_kernel_name("void cutlass::Kernel<float>(int)") == "void cutlass::Kernel<float>(int)"
    assert short_kernel_name("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD (Device -> Device)"


def test_parameters_go_first_and_template_arguments_only_if_still_too_long() -> None:
    name = "void ampere_sgemm_kernel<float, 128>(" + ", ".join(["float const*"] * 8) + ")"
    assert short_kernel_name(name, limit=40) == "ampere_sgemm_kernel<float, 128>"


def test_an_arrow_is_not_a_closing_bracket() -> None:
    name = "copy_kernel<Device->Host, " + "x" * 60 + ">(int)"
    assert short_kernel_name(name) == "copy_kernel"


def test_a_name_without_parts_to_drop_is_cut_with_an_ellipsis() -> None:
    name = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0"
    assert short_kernel_name(name) == name[:59] + "…"
    assert len(short_kernel_name(name)) == 60


def test_names_that_shorten_alike_are_numbered() -> None:
    other_adam = FUSED_ADAM.replace("ADAM_MODE)1", "ADAM_MODE)0")
    assert unique_short_names([FUSED_ADAM, "tiny", other_adam, FUSED_ADAM]) == [
        "at::native::multi_tensor_apply_kernel", "tiny",
        "at::native::multi_tensor_apply_kernel (2)", "at::native::multi_tensor_apply_kernel (3)"]
