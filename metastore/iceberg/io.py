"""pyiceberg's file interface over :mod:`metastore.storage`: the manifests and metadata this package
writes go through the same storage API (local disk or bucket, same retries) as every table file."""

from __future__ import annotations

import io

from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile, OutputStream

from metastore import storage


class StorageInput(InputFile):
    """A file to read whole (manifests and metadata are small)."""

    def __len__(self) -> int:
        return storage.stat(self.location).size

    def exists(self) -> bool:
        return storage.exists(self.location)

    def open(self, seekable: bool = True) -> InputStream:
        return io.BytesIO(storage.read_bytes(self.location))


class _Buffer(io.BytesIO):
    """What pyiceberg writes into: the file appears whole at its location when closed."""

    def __init__(self, location: str) -> None:
        super().__init__()
        self.location = location

    def close(self) -> None:
        if not self.closed:
            storage.write_bytes(self.location, self.getvalue())
        super().close()


class StorageOutput(OutputFile):
    """A file written whole when pyiceberg closes it (an atomic write: never seen half written)."""

    def __len__(self) -> int:
        return storage.stat(self.location).size

    def exists(self) -> bool:
        return storage.exists(self.location)

    def to_input_file(self) -> InputFile:
        return StorageInput(self.location)

    def create(self, overwrite: bool = False) -> OutputStream:
        if not overwrite and self.exists():
            raise FileExistsError(self.location)
        return _Buffer(self.location)


class StorageIO(FileIO):
    """pyiceberg's file IO over :mod:`metastore.storage`, for reading back what this package wrote."""

    def new_input(self, location: str) -> InputFile:
        return StorageInput(location)

    def new_output(self, location: str) -> OutputFile:
        return StorageOutput(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        storage.delete([location if isinstance(location, str) else location.location])
