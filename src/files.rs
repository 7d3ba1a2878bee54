//! Files written atomically: a temporary file beside, fsync, rename, fsync of the directory.
//! A reader sees either the old file or the whole new one, even across a crash. And an
//! exclusive advisory file lock ([`ExclusiveLock`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

/// Writes `bytes` to `path` atomically; see [`write_atomic_with`].
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, |file| file.write_all(bytes), |e| e)
}

/// Writes `path` atomically with `fill` producing the content (streamed, so output larger than
/// memory works): a temporary file in the same directory, fsync, rename, then fsync of the
/// directory so the rename itself survives a crash. The temporary file is removed on failure.
/// `io_error` turns the function's own I/O errors into the caller's error type.
pub fn write_atomic_with<E>(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<File>) -> Result<(), E>,
    io_error: impl Fn(std::io::Error) -> E,
) -> Result<(), E> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| {
        io_error(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file path",
        ))
    })?;
    let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    let result = (|| {
        let mut out = BufWriter::new(File::create(&tmp).map_err(&io_error)?);
        fill(&mut out)?;
        let file = out.into_inner().map_err(|e| io_error(e.into_error()))?;
        file.sync_all().map_err(&io_error)?;
        std::fs::rename(&tmp, path).map_err(&io_error)?;
        // Directory fsync is how POSIX persists a rename; not every platform allows opening a
        // directory, and the data itself is already safe, so a failure here is not an error.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Opens `path` for appending (created if missing) after cutting off a last line without its
/// newline, which a crash or a full disk left half-written: appended to, it would garble the
/// next line. Returns the file and how many bytes were cut.
pub fn open_append_whole_lines(path: &Path) -> std::io::Result<(File, u64)> {
    use std::io::{Read, Seek, SeekFrom};

    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)?;
    let len = file.metadata()?.len();
    let mut end = len;
    let mut chunk = [0u8; 4096];
    // Back from the end to the last newline, a chunk at a time.
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let part = &mut chunk[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(part)?;
        if let Some(i) = part.iter().rposition(|&b| b == b'\n') {
            end = start + i as u64 + 1;
            break;
        }
        end = start;
    }
    if end < len {
        file.set_len(end)?;
        file.sync_all()?;
    }
    Ok((file, len - end))
}

/// An exclusive advisory lock on a file, held until dropped (the kernel drops it when the
/// process dies, so a kill -9 leaves no stale lock behind). The file holds the holder's pid.
#[derive(Debug)]
pub struct ExclusiveLock {
    _file: File,
}

/// Why [`ExclusiveLock::take`] failed.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{path} is locked by another process (pid {holder})")]
    Held { path: String, holder: String },
    #[error("cannot lock {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl ExclusiveLock {
    /// Takes the lock on `path` (created if missing) without waiting, and writes this
    /// process's pid into it.
    pub fn take(path: &Path) -> Result<ExclusiveLock, LockError> {
        use rustix::fs::{flock, FlockOperation};
        use std::io::{Read, Seek};

        let io = |source: std::io::Error| LockError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        if let Err(e) = flock(&file, FlockOperation::NonBlockingLockExclusive) {
            if e != rustix::io::Errno::WOULDBLOCK {
                return Err(io(e.into()));
            }
            let mut holder = String::new();
            file.read_to_string(&mut holder).map_err(io)?;
            let holder = match holder.trim() {
                "" => "unknown".to_string(),
                pid => pid.to_string(),
            };
            return Err(LockError::Held {
                path: path.display().to_string(),
                holder,
            });
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        file.flush().map_err(io)?;
        Ok(ExclusiveLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_fill_leaves_the_old_file_and_no_temporary_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("out.txt");
        write_atomic(&path, b"old").expect("write");
        let failed = write_atomic_with(
            &path,
            |file| {
                file.write_all(b"half of the new")?;
                Err(std::io::Error::other("the producer failed"))
            },
            |e| e,
        );
        assert!(failed.is_err());
        assert_eq!(std::fs::read(&path).expect("read"), b"old");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("out.txt")]);
    }

    /// A half-written last line is cut before appending; whole lines are kept, and a file
    /// that is one long partial line becomes empty.
    #[test]
    fn a_partial_last_line_is_cut_before_appending() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("scores.jsonl");
        let long = "x".repeat(10_000);
        for (before, kept, cut) in [
            ("a\nb\n".to_string(), "a\nb\n".to_string(), 0),
            ("a\nb\n{\"id\":".to_string(), "a\nb\n".to_string(), 6),
            (format!("a\n{long}"), "a\n".to_string(), 10_000),
            (long.clone(), String::new(), 10_000),
            (String::new(), String::new(), 0),
        ] {
            std::fs::write(&path, &before).expect("write");
            let (mut file, dropped) = open_append_whole_lines(&path).expect("open");
            assert_eq!(dropped, cut, "{before:.20}");
            file.write_all(b"c\n").expect("append");
            drop(file);
            assert_eq!(
                std::fs::read_to_string(&path).expect("read"),
                format!("{kept}c\n")
            );
        }
    }

    /// The second taker is refused, naming the holder's pid; dropping the lock frees it.
    #[test]
    fn a_second_taker_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("lock");
        let first = ExclusiveLock::take(&path).expect("first");
        let refused = ExclusiveLock::take(&path).expect_err("second");
        let pid = std::process::id().to_string();
        assert!(
            matches!(&refused, LockError::Held { holder, .. } if *holder == pid),
            "{refused}"
        );
        drop(first);
        ExclusiveLock::take(&path).expect("free again");
    }
}
