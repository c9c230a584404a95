"""Search for the tools: the knowledge space and the memsearch index over earlier turns.

``knowledge`` reads and ranks the ``ks:`` documents of a knowledge space; ``text`` holds the
tokenizer, identifiers and snippets both use. The memsearch index is ``memindex`` (rows,
filters, embedding of pending rows, one hit per turn), scored by ``bm25`` (the incremental
inverted index) and ``vectors`` (dense vectors and their cache), combined by ``fusion``. The
package may import ``actline.storage``, ``actline.timeline``, ``actline.messages`` and the
other ``actline.tools`` packages (the models of ``actline.tools.embeddings``).
"""
