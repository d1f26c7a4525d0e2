"""What ``batch.put`` publishes from a dict of columns: data the step can no longer change.

pyarrow wraps a numpy array's memory without copying it, and the product then lives on
after ``produce`` returns (later steps, writers, the collected result). A step that writes
into the same array again (a buffer reused across batches: ``np.multiply(x, x, out=BUF)``)
would change products already published, silently and depending on thread timing.
"""

import sys


def columns(data: dict) -> dict:
    """``data`` with every numpy array the step could still write to replaced by a copy.

    An array is taken as is only when nothing but ``data`` refers to it (``{"x": a * b}``)
    and it owns its memory; it is then made read-only. Anything else — an array the step
    keeps under a name or attribute, a view of another array, an array with views — is
    copied (docs/python.md gives the cost)."""
    np = sys.modules.get("numpy")
    if np is None:  # numpy never imported: no numpy arrays
        return data
    out = {}
    for name in data:
        v = data[name]  # not .items(): its reused tuple would hold a reference
        if isinstance(v, np.ndarray):
            # References: data's entry, `v` and getrefcount's argument; any other is a name,
            # an attribute or a view through which the step could still write.
            if v.flags.owndata and sys.getrefcount(v) <= 3:
                v.flags.writeable = False
            else:
                v = v.copy()
        out[name] = v
    return out
