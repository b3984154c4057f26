"""The optional C speedups (native/speedups.c); everything else is in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds and seglog runs on the
pure-Python twins of these functions (`seglog.core.native`)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "seglog._speedups",
            sources=["native/speedups.c"],
            include_dirs=["native/xxhash"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
