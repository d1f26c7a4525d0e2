//! The crate's error type. It converts into the columnar crate's [`quiver_columnar::Error`]
//! (a data error prefixed `gpu: `) where a step returns it.

/// What went wrong on the way to, or on, the device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// NVRTC refused a kernel module; its log names `gpu/kernels/FILE.cu(LINE)`.
    #[error("NVRTC failed to compile kernel module '{module}': {log}")]
    Compile { module: String, log: String },
    /// A launch names a kernel that no source defines.
    #[error("no kernel '{0}' in the sources")]
    UnknownKernel(String),
    /// A launch's arguments do not match the kernel's parameters (count, name or type).
    #[error("kernel '{kernel}': {why}")]
    Arguments { kernel: String, why: String },
    /// An environment variable holds a value it does not take.
    #[error("{var}={value}: {why}")]
    Setting {
        var: &'static str,
        value: String,
        why: &'static str,
    },
    /// The CUDA driver failed an operation (`what`: allocation, copy, synchronisation, ...).
    #[error("{what}: {why}")]
    Driver { what: String, why: String },
    /// A batch's layout is outside what the device code handles (sizes, offsets).
    #[error("{0}")]
    Layout(String),
}

impl GpuError {
    /// A driver error while doing `what`.
    pub fn driver(what: impl Into<String>, why: impl std::fmt::Display) -> Self {
        GpuError::Driver {
            what: what.into(),
            why: why.to_string(),
        }
    }
}

impl From<GpuError> for quiver_columnar::Error {
    fn from(e: GpuError) -> Self {
        quiver_columnar::Error::data(format!("gpu: {e}"))
    }
}
