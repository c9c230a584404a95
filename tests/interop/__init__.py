"""The interop suite: actline turns against model servers actline did not write.

``make test`` runs it against the project's own local servers (the ``local`` kind); ``make
interop`` builds llama.cpp's ``llama-server`` and runs it against SmolLM2 there too (the
``llama`` kind, marker ``interop``), then ``python -m bench.interop``.
"""
