"""Build hook for the optional C accelerator of the OTLP decoder.

Everything else is declared in pyproject.toml. The extension is `optional`: when no C compiler
is present the install still succeeds and ingest falls back to the pure-Python decoder
(ingest.otlp_decode reports which one is active, and bench/ingest.py prints it).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "ingest._otlp_fast",
            sources=["ingest/_otlp_fast.c"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        )
    ]
)
