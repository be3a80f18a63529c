"""The one compiled part of gpulens: the Kineto scanner's fast path.

It is optional: where no C compiler or Python headers are at hand, the
build goes on without it and `gpulens ingest` reads every trace with
msgspec alone (the same tables, slower). Everything else is declared in
pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "collector.ingest._kineto_scan",
            sources=["collector/ingest/_kineto_scan.c"],
            extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ],
)
