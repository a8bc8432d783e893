package main

// Exit statuses. submit --wait reports the job's outcome with them
// (submitHelp and README list them); every command uses 0, 1 and 2.
const (
	exitOK            = 0
	exitError         = 1 // anything not listed below
	exitUsage         = 2 // wrong arguments or flags
	exitFailed        = 3
	exitNeedsReview   = 4
	exitDeadLettered  = 5
	exitCanceled      = 6
	exitTimeout       = 7  // submit --wait --timeout passed first
	exitRefused       = 8  // the server refused the submission (4xx)
	exitNotEmpty      = 9  // import: the target job store already holds rows
	exitBadExport     = 10 // import: the file is not a complete export, or does not fit the target's schema
	exitNotIdempotent = 11 // provider probe: the provider did not honour the idempotency key
)

// codedError carries an exit status with the error that explains it.
type codedError struct {
	code int
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }
func (e *codedError) ExitCode() int { return e.code }
