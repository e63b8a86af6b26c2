"""The llama.cpp binding: a loaded model and its context (model), its vocabulary (vocabulary), what to say when llama.cpp
refuses (failures), the ggml library behind it (ggml_library), its log (llama_log), the machine's offload support
(hardware), device faults (device_faults) and the AMX check (amx).
Everything above it in the engine speaks to llama.cpp through these modules."""
