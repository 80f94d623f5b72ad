"""Atomic file output shared by the data scripts and the model-file writer:
write to a temporary file in the same directory, fsync, rename over the
target; on any error the temporary is removed and the target is untouched."""

import hashlib
import os
import tempfile


def write_atomic(path, data):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def combined_sha(digests):
    """One sha256 over {name: hex digest}, independent of dict order."""
    h = hashlib.sha256()
    for name in sorted(digests):
        h.update(("%s  %s\n" % (digests[name], name)).encode())
    return h.hexdigest()
