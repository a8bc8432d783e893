-- The W3C traceparent a job was submitted under (issue 16): each attempt's
-- span links to it. NULL when the submission carried none, or a malformed
-- one (which is ignored, as W3C Trace Context says).
ALTER TABLE jobs ADD COLUMN trace_parent TEXT COLLATE "C";
