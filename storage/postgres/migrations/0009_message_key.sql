-- A queue message is keyed by its job (a job has at most one message, and
-- every statement but Ack already finds it by job_id). Its identity column
-- stays, as the claim order's tie-break inside queue_messages_ready, but
-- loses an index of its own: every claim, heartbeat, deferral and retry
-- rewrites the message's visible_at, which queue_messages_ready holds, so
-- each of those writes inserted a new entry into all three of the table's
-- indexes, and each submission into all three; now two. No table is
-- rewritten: the unique index on job_id becomes the primary key as it is.
ALTER TABLE queue_messages DROP CONSTRAINT queue_messages_pkey;
ALTER TABLE queue_messages ADD CONSTRAINT queue_messages_pkey PRIMARY KEY USING INDEX queue_messages_job;
