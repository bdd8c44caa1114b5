"""The board cost model of scripts/board_model.py: predicted wall time, RTF, caption latency and
memory of this project's runs on RK3576 / RK3588 (docs/board.md section 8).

Modules, lowest first; a module imports only modules above it in this list, never one below:

- ``budget``: the encoders' compute (MACs from the two configs) and the memory budget of both models
- ``costs``: per-SoC unit costs with their sources (``UnitCosts``, ``unit_costs``)
- ``accounting``: what a real run computed (``ChunkWork``, ``AlignWork``, ``Accounting``)
- ``predict``: an accounting under unit costs -> board timings (``predict``, ``Prediction``)
- ``calibrate``: the prefill rate fitted to the reference design's published RTF
- ``record``: real runs of the engine, recorded as accountings (``record_stream`` ...)
- ``words``: the word-timestamp and memory section of the report
- ``finals``: the final-pass section of the report
- ``report``: all runs and predictions of the report, and its markdown
- ``cli``: the command line (``main``)

Nothing here imports a board SDK; the engine is imported only by the functions that run it.
"""
