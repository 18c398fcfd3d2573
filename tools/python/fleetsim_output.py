"""Writing a file whole or not at all, for fleetsim's Python tools (plots, reports)."""

import os
import tempfile


def write_atomically(path, write):
    """Calls write(temporary_path) for a file beside `path`, then renames it over `path`: a
    reader never sees half a file, and a failure leaves no temporary file behind. The file gets
    the mode open() would give it (not mkstemp's 0600) and is on disk before it takes the name."""
    directory = os.path.dirname(os.path.abspath(path))
    name = os.path.basename(path)
    handle, temp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    os.close(handle)
    try:
        write(temp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)
        with open(temp, "rb") as written:
            os.fsync(written.fileno())
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise
