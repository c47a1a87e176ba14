"""ETDump under the official ``executorch.devtools.etdump`` path: the trace as the
official Python dataclasses (:mod:`.schema_flatcc`) and their file codec
(:mod:`.serialize`), over pyexecutorch's own ETDump format description
(:mod:`pyexecutorch.schema.etdump`). Numpy only; no torch."""
