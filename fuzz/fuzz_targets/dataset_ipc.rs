//! The dataset reader's Arrow IPC decoding (every `.arrow` file of a dataset goes through it)
//! on arbitrary bytes: a schema and record batches, or an error naming the file.
#![no_main]

use arrow_buffer::Buffer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ =
        quiver_datasets::ipc::decode_file("fuzz.arrow".as_ref(), &Buffer::from_vec(data.to_vec()));
});
