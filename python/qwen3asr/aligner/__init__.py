"""Word timestamps with Qwen3-ForcedAligner.

The aligner reads the audio and the transcript split into word units, each followed by two
``<timestamp>`` slots (start, end), and classifies every slot into a time bin in one forward
pass. This package holds its stages: ``words`` (the official word units and the input layout
after the audio block) and ``timing`` (the official repair of the predicted bins and their
conversion to seconds).
"""
