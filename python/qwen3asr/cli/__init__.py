"""Command-line programs: ``qwen3asr-transcribe`` (transcribe), ``qwen3asr-mic`` (mic),
``qwen3asr-models`` (models: the cache of models fetched by name, the board conversion).

They are thin layers over the engine: the flags map onto TranscribeOptions and RKOptions
(``common``), so the CLIs and the API give the same answer for the same settings.
"""
