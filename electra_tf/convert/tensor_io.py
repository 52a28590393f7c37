"""Reading and writing the weight files of Hugging Face checkpoints, without PyTorch.

* `model.safetensors` (and sharded `model.safetensors.index.json`) through the
  `safetensors` package's numpy API;
* `pytorch_model.bin` (and sharded `pytorch_model.bin.index.json`) in PyTorch's
  zip format through a restricted unpickler that only rebuilds tensors from
  their raw storages (no code from the file is run). Files in PyTorch's legacy
  (pre-1.6, non-zip) format need `torch` installed.

Example:

>>> import os, tempfile
>>> import numpy as np
>>> from electra_tf.convert import tensor_io
>>> directory = tempfile.mkdtemp()
>>> tensor_io.write_safetensors(os.path.join(directory, "model.safetensors"), {"w": np.eye(2, dtype="float32")})
>>> tensors, files = tensor_io.read_hf_weights(directory)
>>> tensors["w"].tolist(), [os.path.basename(f) for f in files]
([[1.0, 0.0], [0.0, 1.0]], ['model.safetensors'])
"""

import collections
import json
import os
import pickle
import zipfile

import numpy as np

from electra_tf.convert.errors import ConversionError

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def write_safetensors(path: str, tensors: dict, metadata: dict | None = None) -> None:
    """Writes float arrays as a safetensors file (`{"format": "pt"}` metadata, as transformers expects)."""
    from safetensors.numpy import save_file

    arrays = {name: np.ascontiguousarray(value) for name, value in tensors.items()}
    save_file(arrays, path, metadata={"format": "pt", **(metadata or {})})


def read_safetensors(path: str) -> dict:
    from safetensors.numpy import load_file

    return dict(load_file(path))


class _Storage:
    """Stands for `torch.<X>Storage` in a pickle: records the element dtype."""

    def __init__(self, dtype, bfloat16=False):
        self.dtype, self.bfloat16 = np.dtype(dtype), bfloat16


_STORAGES = {
    "FloatStorage": _Storage("<f4"), "DoubleStorage": _Storage("<f8"), "HalfStorage": _Storage("<f2"),
    "BFloat16Storage": _Storage("<u2", bfloat16=True), "LongStorage": _Storage("<i8"),
    "IntStorage": _Storage("<i4"), "ShortStorage": _Storage("<i2"), "CharStorage": _Storage("i1"),
    "ByteStorage": _Storage("u1"), "BoolStorage": _Storage("?"),
}


class _StoredArray:
    def __init__(self, data: np.ndarray, storage: _Storage):
        self.data, self.storage = data, storage


def _rebuild_tensor(stored, offset, size, stride, *unused):
    data, itemsize = stored.data, stored.data.dtype.itemsize
    array = np.lib.stride_tricks.as_strided(
        data[offset:], shape=tuple(size), strides=tuple(s * itemsize for s in stride)).copy()
    if stored.storage.bfloat16:
        array = (array.astype(np.uint32) << 16).view(np.float32)
    return array


def _rebuild_parameter(data, *unused):
    return data


class _TorchZipUnpickler(pickle.Unpickler):
    """Unpickles a PyTorch zip checkpoint's state dict into numpy arrays, allowing nothing else."""

    _ALLOWED = {
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        ("collections", "OrderedDict"): collections.OrderedDict,
    }

    def __init__(self, file, archive: zipfile.ZipFile, prefix: str, path: str):
        super().__init__(file)
        self.archive, self.prefix, self.path = archive, prefix, path

    def find_class(self, module, name):
        if module == "torch" and name in _STORAGES:
            return _STORAGES[name]
        if (module, name) in self._ALLOWED:
            return self._ALLOWED[(module, name)]
        raise ConversionError(f"{self.path}: refusing to unpickle {module}.{name} (only tensors are read)")

    def persistent_load(self, pid):
        _, storage, key, _location, numel = pid
        raw = self.archive.read(f"{self.prefix}/data/{key}")
        return _StoredArray(np.frombuffer(raw, storage.dtype, count=numel), storage)


def read_torch_bin(path: str) -> dict:
    """The state dict of a `pytorch_model.bin`, as numpy arrays (torch-free for the zip format)."""
    if not zipfile.is_zipfile(path):
        return _read_legacy_torch_bin(path)
    with zipfile.ZipFile(path) as archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise ConversionError(f"{path}: not a PyTorch checkpoint (no single */data.pkl in the zip)")
        prefix = pickles[0][: -len("/data.pkl")]
        with archive.open(pickles[0]) as f:
            state = _TorchZipUnpickler(f, archive, prefix, path).load()
    return {name: np.asarray(value) for name, value in state.items()}


def _read_legacy_torch_bin(path: str) -> dict:
    try:
        import torch
    except ImportError:
        raise ConversionError(
            f"{path} is in PyTorch's legacy (non-zip) format, which needs torch to read: "
            "`pip install torch`, or convert the checkpoint to model.safetensors") from None
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {name: value.float().numpy() if value.is_floating_point() else value.numpy()
            for name, value in state.items()}


def _read_file(path: str) -> dict:
    return read_safetensors(path) if path.endswith(".safetensors") else read_torch_bin(path)


def weight_files(directory: str) -> list:
    """The weight file(s) of a Hugging Face model directory, safetensors first."""
    for name in WEIGHT_FILES:
        index = os.path.join(directory, name + ".index.json")
        if os.path.isfile(index):
            with open(index) as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            return [os.path.join(directory, shard) for shard in shards]
        if os.path.isfile(os.path.join(directory, name)):
            return [os.path.join(directory, name)]
    raise ConversionError(f"{directory}: no Hugging Face weights found", missing=list(WEIGHT_FILES))


def read_hf_weights(directory: str) -> tuple:
    """`({name: array}, [files read])` of a Hugging Face model directory."""
    files = weight_files(directory)
    tensors = {}
    for path in files:
        tensors.update(_read_file(path))
    return tensors, files
