// Package pipeline is the core of edgepipe: the closed set of job statuses and
// the one table that says which transitions are allowed, the retry policy that
// turns an error class into the next status, the stages a job runs through,
// and the interfaces (owned here, implemented by the drivers under storage/)
// that the core needs from a job store and an object store.
//
// pipeline imports no driver. Everything that touches SQLite, S3, the file
// system or ffmpeg lives in another package and is handed in.
package pipeline
