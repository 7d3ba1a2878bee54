//! Request bodies read into one buffer of their announced size. A large body goes into an
//! anonymous memory map of its own, so its pages return to the operating system the moment
//! the request ends — answered, failed or timed out — whichever thread frees it. Collected
//! the usual way (axum's `Bytes`: hyper's chunks, then one copy), 100 uploads stalled under
//! `max_body_bytes` left the process at 464 MB after their 408s (the allocator keeps freed
//! pages of idle worker threads), against 22 MB before them.

use std::ops::Deref;

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use axum::http::{header, StatusCode};
use http_body_util::BodyExt;
use memmap2::MmapMut;

use super::{ApiError, Shared};

/// Bodies up to this size are read into the heap: a map costs two system calls, worth it only
/// where the allocator would keep the pages.
const MAP_FROM_BYTES: usize = 256 << 10;

/// The whole request body, at most `http.max_body_bytes` (413 beyond, before reading when
/// `Content-Length` says so).
pub(super) struct RequestBody(Buffer);

enum Buffer {
    Heap(Vec<u8>),
    Mapped { map: MmapMut, len: usize },
}

impl Deref for RequestBody {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.0.bytes()
    }
}

impl Buffer {
    /// An empty buffer for `expected` bytes.
    fn with_capacity(expected: usize) -> Result<Buffer, ApiError> {
        if expected < MAP_FROM_BYTES {
            return Ok(Buffer::Heap(Vec::with_capacity(expected)));
        }
        let map = MmapMut::map_anon(expected).map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot map {expected} bytes for the request body: {e}"),
            )
        })?;
        Ok(Buffer::Mapped { map, len: 0 })
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Buffer::Heap(bytes) => bytes,
            Buffer::Mapped { map, len } => &map[..*len],
        }
    }

    /// Appends `data`; the caller has checked that the total stays within `limit`. A heap
    /// buffer that would pass [`MAP_FROM_BYTES`] (a body without `Content-Length`, or longer
    /// than announced) moves into a map of `limit` bytes, of which only the written pages
    /// are resident.
    fn extend(&mut self, data: &[u8], limit: usize) -> Result<(), ApiError> {
        let needed = self.bytes().len() + data.len();
        let grows_past = match self {
            Buffer::Heap(bytes) => needed > bytes.capacity() && needed >= MAP_FROM_BYTES,
            Buffer::Mapped { map, .. } => needed > map.len(),
        };
        if grows_past {
            let mut larger = Buffer::with_capacity(limit.max(MAP_FROM_BYTES))?;
            larger.write(self.bytes());
            *self = larger;
        }
        self.write(data);
        Ok(())
    }

    /// Copies `data` to the end; a map has room for it.
    fn write(&mut self, data: &[u8]) {
        match self {
            Buffer::Heap(bytes) => bytes.extend_from_slice(data),
            Buffer::Mapped { map, len } => {
                map[*len..*len + data.len()].copy_from_slice(data);
                *len += data.len();
            }
        }
    }
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is larger than http.max_body_bytes = {limit} bytes"),
    )
}

/// The empty buffer of a body announced as `announced` bytes (413 above `limit`).
fn start(announced: Option<usize>, limit: usize) -> Result<Buffer, ApiError> {
    if announced.is_some_and(|n| n > limit) {
        return Err(too_large(limit));
    }
    Buffer::with_capacity(announced.unwrap_or(0))
}

/// Appends one chunk of the body (413 when the body passes `limit`).
fn push(buffer: &mut Buffer, data: &[u8], limit: usize) -> Result<(), ApiError> {
    if buffer.bytes().len() + data.len() > limit {
        return Err(too_large(limit));
    }
    buffer.extend(data, limit)
}

/// Reads `body`, announced as `announced` bytes, into one buffer of at most `limit` bytes.
async fn read(mut body: Body, announced: Option<usize>, limit: usize) -> Result<Buffer, ApiError> {
    let mut buffer = start(announced, limit)?;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("cannot read the request body: {e}"),
            )
        })?;
        if let Ok(data) = frame.into_data() {
            push(&mut buffer, &data, limit)?;
        }
    }
    Ok(buffer)
}

impl FromRequest<Shared> for RequestBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &Shared) -> Result<Self, ApiError> {
        let announced = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        read(request.into_body(), announced, state.limits.max_body_bytes)
            .await
            .map(RequestBody)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body `chunks` as `read` assembles it frame by frame.
    fn assemble(
        chunks: &[&[u8]],
        announced: Option<usize>,
        limit: usize,
    ) -> Result<Vec<u8>, StatusCode> {
        let mut buffer = start(announced, limit).map_err(|e| e.status)?;
        for chunk in chunks {
            push(&mut buffer, chunk, limit).map_err(|e| e.status)?;
        }
        Ok(RequestBody(buffer).to_vec())
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn small_and_large_bodies_arrive_whole_in_order() {
        for (total, chunk, announce) in [
            (10, 3, true),
            (10, 3, false),
            (MAP_FROM_BYTES + 17, 4096, true),
            (MAP_FROM_BYTES + 17, 4096, false),
            (3 * MAP_FROM_BYTES, 65_536, false),
        ] {
            let whole = pattern(total);
            let chunks: Vec<&[u8]> = whole.chunks(chunk).collect();
            let got = assemble(&chunks, announce.then_some(total), 4 << 20);
            assert_eq!(got.as_deref(), Ok(&whole[..]), "{total} bytes in {chunk}");
        }
    }

    #[test]
    fn a_large_body_is_mapped_and_a_small_one_is_not() {
        let mapped =
            |announced| matches!(start(Some(announced), 4 << 20), Ok(Buffer::Mapped { .. }));
        assert!(!mapped(MAP_FROM_BYTES - 1));
        assert!(mapped(MAP_FROM_BYTES));
    }

    #[test]
    fn a_body_longer_than_announced_is_still_read_whole() {
        let whole = pattern(MAP_FROM_BYTES + 5);
        let chunks: Vec<&[u8]> = whole.chunks(1000).collect();
        let got = assemble(&chunks, Some(100), 4 << 20);
        assert_eq!(got.as_deref(), Ok(&whole[..]));
    }

    #[test]
    fn over_the_limit_is_413_announced_or_not() {
        let limit = MAP_FROM_BYTES + 10;
        let whole = pattern(limit + 1);
        let chunks: Vec<&[u8]> = whole.chunks(4096).collect();
        let too_large = Err(StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(assemble(&[], Some(limit + 1), limit), too_large);
        assert_eq!(assemble(&chunks, None, limit), too_large);
        let exact = pattern(limit);
        let chunks: Vec<&[u8]> = exact.chunks(4096).collect();
        assert_eq!(assemble(&chunks, None, limit).map(|b| b.len()), Ok(limit));
    }

    #[tokio::test]
    async fn read_takes_a_whole_body() {
        let whole = pattern(MAP_FROM_BYTES * 2);
        let buffer = read(Body::from(whole.clone()), Some(whole.len()), 4 << 20).await;
        assert_eq!(buffer.ok().map(|b| RequestBody(b).to_vec()), Some(whole));
    }
}
