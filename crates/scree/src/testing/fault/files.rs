//! The file-system face of [`FaultFs`]: its [`FileSystem`] implementation and the file handles
//! it gives out.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::fs::{FileLock, FileSystem, ReadableFile, WritableFile};

use super::*;

pub(super) fn parent(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

pub(super) fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

pub(super) fn dead() -> io::Error {
    io::Error::other("file handle from before a crash")
}

pub(super) struct FaultWritable {
    fs: FaultFs,
    epoch: u64,
    path: PathBuf,
    ino: InodeRef,
    len: u64,
}

impl FaultWritable {
    fn alive(&self) -> io::Result<()> {
        if self.fs.sh.epoch.load(Ordering::SeqCst) != self.epoch {
            return Err(dead());
        }
        Ok(())
    }
}

impl WritableFile for FaultWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.alive()?;
        let short = self.fs.check(OpKind::Write, &self.path)?;
        let mut i = self.ino.write();
        if short {
            let half = data.get(..data.len() / 2).unwrap_or_default();
            i.data.extend_from_slice(half);
            let end = i.data.len();
            i.boundaries.push(end);
            self.len += half.len() as u64;
            drop(i);
            return Err(self.fs.sh.state.lock().fault_error(&self.path));
        }
        i.data.extend_from_slice(data);
        let end = i.data.len();
        i.boundaries.push(end);
        self.len += data.len() as u64;
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.alive()?;
        if self.fs.check(OpKind::Write, &self.path)? {
            return Err(self.fs.sh.state.lock().fault_error(&self.path));
        }
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        self.alive()?;
        self.fs.check(OpKind::Sync, &self.path)?;
        let mut i = self.ino.write();
        i.synced = i.data.len();
        i.boundaries.clear();
        Ok(())
    }
    fn len(&self) -> u64 {
        self.len
    }
}

pub(super) struct FaultReadable {
    fs: FaultFs,
    epoch: u64,
    path: PathBuf,
    ino: InodeRef,
    len: u64,
}

impl ReadableFile for FaultReadable {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        if self.fs.sh.epoch.load(Ordering::SeqCst) != self.epoch {
            return Err(dead());
        }
        self.fs.check(OpKind::Read, &self.path)?;
        let i = self.ino.read();
        let start = usize::try_from(offset).map_err(|_| io::Error::other("offset"))?;
        let end = start
            .checked_add(len)
            .ok_or_else(|| io::Error::other("length"))?;
        match i.data.get(start..end) {
            Some(b) => Ok(b.to_vec()),
            None => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("read past end of {}", self.path.display()),
            )),
        }
    }
    fn len(&self) -> u64 {
        self.len
    }
}

pub(super) struct FaultLock {
    fs: FaultFs,
    path: PathBuf,
}

impl FileLock for FaultLock {}

impl Drop for FaultLock {
    fn drop(&mut self) {
        self.fs.sh.locks.lock().remove(&self.path);
    }
}

impl FileSystem for FaultFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let mut s = self.sh.state.lock();
        s.check(OpKind::Create, path)?;
        if !s.dirs.contains(&parent(path)) {
            return Err(not_found(&parent(path)));
        }
        let (ino, r) = s.new_inode();
        s.live.insert(path.to_path_buf(), ino);
        s.created.insert(path.to_path_buf());
        s.record(
            format!("create {}", path.display()),
            vec![(path.to_path_buf(), Some(ino))],
        );
        s.gc();
        Ok(Box::new(FaultWritable {
            fs: self.clone(),
            epoch: s.epoch,
            path: path.to_path_buf(),
            ino: r,
            len: 0,
        }))
    }

    fn reopen_for_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let mut s = self.sh.state.lock();
        s.check(OpKind::Open, path)?;
        let ino = *s.live.get(path).ok_or_else(|| not_found(path))?;
        let r = s.inodes.get(&ino).cloned().ok_or_else(|| not_found(path))?;
        // The inode's synced length stays where it is: what this writer appends is unsynced
        // until its sync, as on a created file.
        let len = r.read().data.len() as u64;
        Ok(Box::new(FaultWritable {
            fs: self.clone(),
            epoch: s.epoch,
            path: path.to_path_buf(),
            ino: r,
            len,
        }))
    }

    fn open(&self, path: &Path, _direct: bool) -> io::Result<Arc<dyn ReadableFile>> {
        let mut s = self.sh.state.lock();
        s.check(OpKind::Open, path)?;
        let ino = *s.live.get(path).ok_or_else(|| not_found(path))?;
        let r = s.inodes.get(&ino).cloned().ok_or_else(|| not_found(path))?;
        let len = r.read().data.len() as u64;
        Ok(Arc::new(FaultReadable {
            fs: self.clone(),
            epoch: s.epoch,
            path: path.to_path_buf(),
            ino: r,
            len,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.sh.state.lock();
        s.check(OpKind::Rename, to)?;
        let ino = s.live.remove(from).ok_or_else(|| not_found(from))?;
        s.live.insert(to.to_path_buf(), ino);
        s.record(
            format!("rename {} -> {}", from.display(), to.display()),
            vec![(from.to_path_buf(), None), (to.to_path_buf(), Some(ino))],
        );
        s.gc();
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.hold_at_gate(OpKind::Remove, path);
        let mut s = self.sh.state.lock();
        s.check(OpKind::Remove, path)?;
        s.live.remove(path).ok_or_else(|| not_found(path))?;
        s.record(
            format!("remove {}", path.display()),
            vec![(path.to_path_buf(), None)],
        );
        s.gc();
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut s = self.sh.state.lock();
        s.check(OpKind::List, dir)?;
        if !s.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        let mut out: Vec<String> = s
            .live
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect();
        for d in &s.dirs {
            if d.parent() == Some(dir) {
                if let Some(n) = d.file_name().and_then(|n| n.to_str()) {
                    out.push(n.to_string());
                }
            }
        }
        Ok(out)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.sh.state.lock();
        s.check(OpKind::Mkdir, dir)?;
        let mut d = Some(dir);
        while let Some(p) = d {
            if p.as_os_str().is_empty() {
                break;
            }
            s.dirs.insert(p.to_path_buf());
            d = p.parent();
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.sh.state.lock();
        s.check(OpKind::SyncDir, dir)?;
        let in_dir = |p: &PathBuf| p.parent() == Some(dir);
        s.durable.retain(|p, _| !in_dir(p));
        let entries: Vec<(PathBuf, u64)> = s
            .live
            .iter()
            .filter(|(p, _)| in_dir(p))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        s.durable.extend(entries);
        s.settle(|p| p.parent() == Some(dir));
        s.gc();
        Ok(())
    }

    fn sync_file(&self, path: &Path) -> io::Result<()> {
        let r = {
            let mut s = self.sh.state.lock();
            s.check(OpKind::Sync, path)?;
            let ino = *s.live.get(path).ok_or_else(|| not_found(path))?;
            s.inodes.get(&ino).cloned().ok_or_else(|| not_found(path))?
        };
        let mut i = r.write();
        i.synced = i.data.len();
        i.boundaries.clear();
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let s = self.sh.state.lock();
        s.live.contains_key(path) || s.dirs.contains(path)
    }

    fn file_size(&self, path: &Path) -> io::Result<u64> {
        let s = self.sh.state.lock();
        let ino = s.live.get(path).ok_or_else(|| not_found(path))?;
        let r = s.inodes.get(ino).ok_or_else(|| not_found(path))?;
        let len = r.read().data.len() as u64;
        Ok(len)
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        let mut locks = self.sh.locks.lock();
        if !locks.insert(path.to_path_buf()) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "lock held by another Db on this FaultFs",
            ));
        }
        Ok(Box::new(FaultLock {
            fs: self.clone(),
            path: path.to_path_buf(),
        }))
    }
}
