"""Field limits, shared by validation at the edge and by the column sizes in the schema."""

MAX_PAYLOAD_BYTES = 1_000_000
# A request body: the payload plus its envelope. Sent as ``payload_text`` (a JSON string holding
# JSON text) every quote and backslash of the payload is escaped, which can double it.
MAX_REQUEST_BYTES = 2 * MAX_PAYLOAD_BYTES + 64 * 1024
MAX_PAYLOAD_DEPTH = 64
MAX_QUEUE_LEN = 255
MAX_TYPE_LEN = 255
MAX_TAGS_LEN = 1000
MAX_IDEMPOTENCY_KEY_LEN = 255
MAX_ACTOR_LEN = 100
MAX_JOB_ID_LEN = 50
MAX_WORKER_ID_LEN = 100
# A worker's row (the Workers table): its host name and chokaq's version.
MAX_HOST_LEN = 255
MAX_VERSION_LEN = 50
MAX_BULK_IDS = 1000
DEFAULT_PRIORITY = 10
DEFAULT_BULK_MAX_JOBS = 100
# Schedules: a name leaves room in the idempotency key "schedule:<name>@<slot>Z" (MAX_IDEMPOTENCY_KEY_LEN).
MAX_SCHEDULE_NAME_LEN = 200
MAX_CRON_LEN = 120
MAX_TIME_ZONE_LEN = 64
