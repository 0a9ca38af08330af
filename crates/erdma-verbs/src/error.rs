//! Typed errors. Every verb's return value is normalised here: libibverbs reports failures as `-1` with
//! `errno`, as a positive errno, or (some providers, eRDMA among them) as a *negative* errno from the post
//! verbs. All three become [`Error::Verbs`] with a positive `errno`.

use std::io;

use crate::caps::{Feature, Vendor};

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in erdma-verbs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A verb returned an error. `errno` is always positive, whatever sign the provider used.
    #[error("{call} failed: {source} (errno {errno}){hint}", hint = errno_hint(*errno))]
    Verbs {
        /// The C function that failed, e.g. `ibv_create_qp`.
        call: &'static str,
        /// Positive errno.
        errno: i32,
        /// The errno as an [`io::Error`].
        #[source]
        source: io::Error,
    },
    /// The device lacks a feature (eRDMA has no UD, no SRQ, no extended verbs...). Checked before the
    /// driver is asked, so this replaces the driver's `EINVAL`/`EOPNOTSUPP` or a crash.
    #[error("{device} ({vendor}): {feature} is not supported; {hint}")]
    Unsupported {
        /// Device name, e.g. `erdma_0`.
        device: String,
        /// Vendor profile of the device.
        vendor: Vendor,
        /// What was asked for.
        feature: Feature,
        /// What to do instead.
        hint: &'static str,
    },
    /// A request exceeds a device or queue-pair limit (SGE count, inline size, queue depth, MR size).
    #[error("{what}: requested {requested}, limit {limit} on {device}")]
    ExceedsCaps {
        /// Device name.
        device: String,
        /// Which limit, e.g. `send SGEs per work request`.
        what: &'static str,
        /// The requested amount.
        requested: u64,
        /// The limit.
        limit: u64,
    },
    /// No device has the requested name.
    #[error("RDMA device '{name}' not found; devices present: {available}")]
    NoSuchDevice {
        /// Requested name.
        name: String,
        /// Comma-separated names of the devices that exist (or `none`).
        available: String,
    },
    /// A caller-supplied value is invalid (the message names the field and what was expected).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A destination buffer (RECV, READ) must be exclusively owned while the NIC writes into it.
    #[error(
        "memory region is shared ({count} handles): RECV/READ destinations must be the only handle; drop clones or wait for their completions"
    )]
    BufferShared {
        /// Strong handle count seen.
        count: usize,
    },
    /// A safe view (`as_slice`, `get_mut`) of a region the peer may write into at any time.
    #[error(
        "memory region of {len} bytes grants remote write or atomic access: the peer may change it at any time, so no safe reference to it is handed out; copy it out with read_into, or use the unsafe as_slice_unchecked/get_mut_unchecked where your protocol keeps the peer out"
    )]
    RemotelyWritable {
        /// Region length.
        len: usize,
    },
    /// A local or remote range falls outside its memory region.
    #[error("range {start}..{end} is outside the {len}-byte {which} memory region")]
    OutOfBounds {
        /// `local` or `remote`.
        which: &'static str,
        /// Range start.
        start: u64,
        /// Range end.
        end: u64,
        /// Region length.
        len: u64,
    },
    /// A chained post was refused by the driver at work request `posted` (the ones before it were posted
    /// and will complete).
    #[error("ibv_post_{kind} refused work request #{posted} of the batch: {source}")]
    Post {
        /// `send` or `recv`.
        kind: &'static str,
        /// How many WRs of the batch were accepted.
        posted: usize,
        /// The normalised error.
        #[source]
        source: Box<Error>,
    },
    /// A chained post failed without naming the refused work request (rxe reports a failed doorbell
    /// write this way after queueing every WR): any of the batch may still be executed, so their buffers
    /// stay held until their completions are polled or the QP is destroyed.
    #[error(
        "ibv_post_{kind} failed for a batch of {batch} work request(s) without naming the refused one \
         (the driver's doorbell may have failed after queueing them): their buffers stay held until their \
         completions arrive or the QP is destroyed; recreate the QP: {source}"
    )]
    PostUnknown {
        /// `send` or `recv`.
        kind: &'static str,
        /// How many WRs the batch held (all still held).
        batch: usize,
        /// The normalised error.
        #[source]
        source: Box<Error>,
    },
    /// A work completion reported an error; the QP is now in the error state and must be recreated.
    #[error(
        "work completion for wr_id {wr_id} (tag {tag}) failed: {status} (vendor error {vendor_err:#x})"
    )]
    Completion {
        /// Library-assigned work request id.
        wr_id: u64,
        /// Caller tag.
        tag: u64,
        /// Status text, e.g. `IBV_WC_REM_ACCESS_ERR`.
        status: crate::cq::WcStatus,
        /// Vendor-specific error code.
        vendor_err: u32,
    },
    /// An rdma_cm step did not produce the expected event.
    #[error("rdma_cm: expected {expected}, got {got} (status {status})")]
    CmEvent {
        /// Expected event name.
        expected: &'static str,
        /// Received event name.
        got: String,
        /// Event status (negative errno or a reject reason).
        status: i32,
    },
    /// Waiting timed out.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(std::time::Duration, &'static str),
}

fn errno_hint(errno: i32) -> &'static str {
    match errno {
        libc::ENOMEM => {
            "; hint: RLIMIT_MEMLOCK is probably too low (64 KiB from containerd): `ulimit -l` must say unlimited"
        }
        libc::EOPNOTSUPP | libc::ENOSYS => {
            "; hint: the device or provider does not implement this verb"
        }
        libc::EACCES | libc::EPERM => {
            "; hint: the process needs CAP_IPC_LOCK / access to /dev/infiniband"
        }
        _ => "",
    }
}

impl Error {
    /// Builds [`Error::Verbs`] from a positive errno.
    pub(crate) fn verbs(call: &'static str, errno: i32) -> Self {
        let errno = if errno == 0 { libc::EIO } else { errno.abs() };
        Error::Verbs {
            call,
            errno,
            source: io::Error::from_raw_os_error(errno),
        }
    }

    /// Builds [`Error::Verbs`] from the thread's `errno` (for verbs that return NULL or -1).
    pub(crate) fn last(call: &'static str) -> Self {
        Self::verbs(
            call,
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }

    /// The positive errno of a verbs failure, if this is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Verbs { errno, .. } => Some(*errno),
            Error::Post { source, .. } | Error::PostUnknown { source, .. } => source.errno(),
            _ => None,
        }
    }

    /// True for [`Error::Unsupported`] and for verbs that failed with `EOPNOTSUPP`/`ENOSYS`.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Error::Unsupported { .. })
            || matches!(self.errno(), Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS))
    }
}

/// Normalises a verbs return code: `0` is success; `-1` means "see errno"; any other negative value is a
/// negated errno; a positive value is an errno.
pub(crate) fn check(call: &'static str, ret: libc::c_int) -> Result<()> {
    match ret {
        0 => Ok(()),
        -1 => Err(Error::last(call)),
        r => Err(Error::verbs(call, r.abs())),
    }
}

/// Normalises the return code of a verb that *returns* its errno instead of setting `errno`: the post
/// verbs (`ibv_post_send`, `ibv_post_recv`) return a positive errno, or on some providers (eRDMA) a
/// negated one. `-1` is `-EPERM` there, not "see errno": the thread's `errno` is whatever an earlier
/// call left behind.
pub(crate) fn check_returned(call: &'static str, ret: libc::c_int) -> Result<()> {
    match ret {
        0 => Ok(()),
        r => Err(Error::verbs(call, r.saturating_abs())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_errno_is_normalised() {
        let e = check("ibv_post_send", -libc::ENOMEM).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOMEM));
        assert!(
            e.to_string().contains("memlock") || e.to_string().contains("MEMLOCK"),
            "{e}"
        );
    }

    #[test]
    fn positive_errno_is_kept() {
        let e = check("ibv_post_send", libc::EINVAL).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EINVAL));
        assert!(e.to_string().starts_with("ibv_post_send failed"), "{e}");
    }

    /// Sets the thread's errno to `e` the way a failed libc call does.
    fn set_errno(e: i32) {
        // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
        unsafe { *libc::__errno_location() = e };
    }

    #[test]
    fn post_verbs_returning_minus_eperm_report_eperm_not_a_stale_errno() {
        set_errno(libc::ENOENT);
        let e = check_returned("ibv_post_send", -libc::EPERM).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EPERM), "{e}");
        set_errno(libc::ENOENT);
        let e = check_returned("ibv_post_recv", libc::EPERM).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EPERM), "{e}");
        let e = check_returned("ibv_post_send", -libc::ENOMEM).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOMEM), "{e}");
        assert!(check_returned("ibv_post_send", 0).is_ok());
        // The errno-setting convention still reads errno for -1.
        set_errno(libc::ENOENT);
        assert_eq!(
            check("ibv_reg_mr", -1).unwrap_err().errno(),
            Some(libc::ENOENT)
        );
    }

    #[test]
    fn zero_is_ok_and_unsupported_detected() {
        assert!(check("x", 0).is_ok());
        assert!(Error::verbs("ibv_create_srq", -libc::EOPNOTSUPP).is_unsupported());
        assert!(!Error::verbs("ibv_create_qp", libc::ENOMEM).is_unsupported());
    }
}
