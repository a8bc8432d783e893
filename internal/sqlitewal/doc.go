// Package sqlitewal registers a SQLite VFS, Name, that writes each WAL
// commit to the file with one write(2) (up to 128 KiB) instead of two a
// frame.
//
// SQLite's default VFS hands every WAL frame to the kernel as two pwrite
// calls, its 24-byte header and then its page (wal.c walWriteOneFrame),
// and a commit of a group of submissions writes a few dozen frames. With
// synchronous=NORMAL nothing is fsynced at commit, so those calls are most
// of what a commit costs: counted with perf in `edgepipe bench api`, 4.1
// pwrite calls a submission, all to the WAL; through this VFS, 0.44.
//
// This VFS is the default one with a layer on WAL files: appended frames
// (a frame header at a frame's offset, and the page right after it) are
// kept in a buffer and written together when the commit frame's page
// arrives (the frame whose header carries the database size, wal.c
// walEncodeFrame), before any other call on the WAL file, when a frame
// would take the buffer past the most the default VFS writes at once, and
// — seen through the connection's main database file, its only other
// wrapped file — when the connection gives up the WAL write lock or, in
// locking_mode=EXCLUSIVE, its file lock. That last point is the
// invariant: nothing stays buffered once the connection no longer holds
// the write lock, so no other connection or process can write or truncate
// the WAL under bytes kept here (TestRollbackWithOpenReadStatement and
// TestLeavingExclusiveModeLeavesNothingBehind show the corruption without
// either flush). SQLite returns from COMMIT, and publishes the commit to
// readers, only after the commit frame's write returned, so a process
// killed right after a commit keeps it (TestKilledRightAfterCommit),
// readers see every frame a published commit names
// (TestReadersDuringCommits), and a write that fails fails the COMMIT
// (TestWriteErrorFailsCommit, TestSyncSplitTailErrorFailsCommit).
// Anything else — the WAL header, a page rewritten in place, a frame
// header rewritten right after a read of its frame, the rest of a write
// split around a sync point — goes through at once, its error its
// caller's; what the lock releases write are frames of a transaction that
// did not commit, whose error SQLite would not act on. Two reviews by
// helpers that did not write it found the exclusive-mode flush missing and
// a 24-byte rest of a split write taken for a frame header; both are fixed
// and have their tests.
//
// The C code (walvfs.c) uses the SQLite that github.com/mattn/go-sqlite3
// links into the program; Register fails if it is not there.
package sqlitewal
