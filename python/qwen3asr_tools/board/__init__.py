"""The board cost model of scripts/board_model.py: predicted wall time, RTF, caption latency and
memory of this project's runs on RK3576 / RK3588 (docs/board.md section 8).

- ``budget``: the encoders' compute (MACs from the two configs) and the memory budget of both models
"""
