//! libfabric-sys links and its wrapped `static inline` calls work: ask
//! libfabric for the `tcp` provider and find it.

use std::ffi::{CStr, CString, c_char};
use std::ptr;

use libfabric_sys::*;

unsafe extern "C" {
    // fi_freeinfo() frees the hint strings with free(): they must come from malloc.
    fn strdup(s: *const c_char) -> *mut c_char;
}

#[test]
fn getinfo_finds_the_tcp_provider() {
    let tcp = CString::new("tcp").unwrap();
    // SAFETY: fi_allocinfo (a wrapped static inline, fi_dupinfo(NULL))
    // returns a zeroed fi_info with every attribute struct allocated, or NULL.
    let hints = unsafe { fi_allocinfo() };
    assert!(!hints.is_null(), "fi_allocinfo returned NULL");
    // SAFETY: hints and its attribute structs were just allocated by
    // libfabric; the prov_name string is malloc'd as fi_freeinfo expects.
    unsafe {
        (*(*hints).ep_attr).type_ = FI_EP_RDM;
        (*hints).caps = FI_MSG | FI_RMA;
        (*(*hints).fabric_attr).prov_name = strdup(tcp.as_ptr());
    }
    let mut info: *mut fi_info = ptr::null_mut();
    // SAFETY: valid hints, a valid out-pointer; node/service NULL means any.
    let ret = unsafe {
        fi_getinfo(
            fi_header_version(),
            ptr::null(),
            ptr::null(),
            0,
            hints,
            &mut info,
        )
    };
    // SAFETY: hints came from fi_allocinfo and is not used again.
    unsafe { fi_freeinfo(hints) };
    assert_eq!(ret, 0, "fi_getinfo(tcp) failed: {ret}");
    assert!(!info.is_null());

    let mut names = Vec::new();
    let mut cur = info;
    while !cur.is_null() && names.len() < 10_000 {
        // SAFETY: cur is an element of the list fi_getinfo returned, whose
        // fabric_attr and its prov_name are set for every entry.
        unsafe {
            let name = CStr::from_ptr((*(*cur).fabric_attr).prov_name);
            names.push(name.to_string_lossy().into_owned());
            cur = (*cur).next;
        }
    }
    // SAFETY: info is the list fi_getinfo returned; no pointer into it survives.
    unsafe { fi_freeinfo(info) };
    assert!(
        names.iter().any(|n| n.split(';').next() == Some("tcp")),
        "tcp not among {names:?}"
    );
}

#[test]
fn runtime_library_is_at_least_the_headers_minimum() {
    // SAFETY: fi_version takes no arguments and returns a value.
    let v = unsafe { fi_version() };
    assert!(
        v >= FI_MIN_API_VERSION,
        "libfabric {}.{}",
        FI_MAJOR(v),
        FI_MINOR(v)
    );
}

#[test]
fn strerror_names_eagain() {
    // SAFETY: fi_strerror returns a static string for any error number.
    let s = unsafe { CStr::from_ptr(fi_strerror(FI_EAGAIN)) };
    // SAFETY: as above.
    let other = unsafe { CStr::from_ptr(fi_strerror(FI_ENOENT)) };
    assert!(!s.to_bytes().is_empty());
    assert_ne!(s, other);
}
