package provider

import "edgepipe/pipeline"

// ContractRow is one line of the declared contract table.
type ContractRow struct {
	Op       string
	Contract pipeline.Contract
	Why      string
}

// OpOther stands for every operation the table does not name.
const OpOther = "*"

// contracts is the declared contract table (docs/design.md §6), filled before any
// retry code was written. A row may only say idempotent_verified when a test
// against the server proves it; see ContractTable.
var contracts = []ContractRow{
	{
		Op:       pipeline.OpImage,
		Contract: pipeline.ContractIdempotentVerified,
		Why: "POST /v1/images deduplicates Idempotency-Key: the same key and body return the same bytes " +
			"and are billed once, proven against the server by TestImageContractIdempotentVerifiedIsProven " +
			"(not taken from documentation); the adapter sends meta.IdempotencyKey and refuses a call without one. " +
			"A deployment relies on the key only while a proof of `edgepipe provider probe image` is fresh " +
			"(EDGEPIPE_PROOF_MAX_AGE); otherwise the call runs as sync",
	},
	{
		Op:       pipeline.OpSpeech,
		Contract: pipeline.ContractSync,
		Why: "POST /v1/speech answers with the audio in one exchange and bills every committed request, " +
			"ignoring Idempotency-Key; a failure after sending is ambiguous, so the adapter sends no key and " +
			"builds a request net/http cannot resend (TestSpeechDropIsBilledOnceAndUnknown)",
	},
	{
		Op:       pipeline.OpVideoSubmit,
		Contract: pipeline.ContractAsyncPollable,
		Why: "POST /v1/videos returns an external job id (202) that GET /v1/videos/{id} reports on, so " +
			"recovery polls the id; a resubmission is a new billed job and Idempotency-Key is ignored, so " +
			"none is sent and the request cannot be resent; a failure before the id is known is ambiguous",
	},
	{
		Op:       OpOther,
		Contract: pipeline.ContractFailClosed,
		Why: "no contract was established for any other operation: no retry after a send, a human decides " +
			"(reads of a video job bill nothing and need no contract)",
	},
}

// ContractTable returns the declared contract of every operation, the last
// row (Op == OpOther) covering all operations not listed. The lead prints it
// in the closing note; Contract answers from it. The returned slice is a
// copy.
func ContractTable() []ContractRow {
	return append([]ContractRow(nil), contracts...)
}

// contractOf looks op up in the table; unknown operations fail closed.
func contractOf(op string) pipeline.Contract {
	for _, r := range contracts {
		if r.Op == op && op != OpOther {
			return r.Contract
		}
	}
	return pipeline.ContractFailClosed
}
