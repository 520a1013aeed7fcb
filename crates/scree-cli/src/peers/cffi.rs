//! Small helpers shared by the C bindings: C strings for paths and names, and turning the C
//! APIs' `char** errptr` convention into a `Result`.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;

use anyhow::{anyhow, Result};

/// A NUL-terminated copy of `path` (paths with interior NUL bytes are rejected).
pub fn path_cstring(path: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| anyhow!("path {} contains a NUL byte", path.display()))
}

/// Takes ownership of an error string a C API stored through `errptr`: `None` when the call
/// succeeded (the pointer is still null), else the message, after freeing it with `free`.
///
/// # Safety
/// `err` must be null or a NUL-terminated string allocated by the library whose `free` is given.
pub unsafe fn take_error(
    err: *mut c_char,
    free: unsafe extern "C" fn(*mut c_void),
) -> Option<String> {
    if err.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per the caller's contract; we copy before freeing.
    let msg = unsafe { CStr::from_ptr(err) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: allocated by the library with malloc; freed exactly once here.
    unsafe { free(err.cast()) };
    Some(msg)
}

/// Copies and frees a malloc()ed, NUL-terminated string returned by a C API (`None` if null).
///
/// # Safety
/// As for [`take_error`].
pub unsafe fn take_string(
    s: *mut c_char,
    free: unsafe extern "C" fn(*mut c_void),
) -> Option<String> {
    // SAFETY: the caller's contract for `s` is `take_error`'s for `err`: null, or a
    // NUL-terminated string allocated by the library whose `free` is given.
    unsafe { take_error(s, free) }
}
