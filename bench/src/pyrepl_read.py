"""Reads row events with python-mysql-replication (PyPI `mysql-replication`), for
`tributary bench capture`: from a binlog file/position until a known number of
rows has been decoded, then prints `<rows> <seconds> <CPU seconds>`.

usage: pyrepl_read.py HOST PORT FILE POS ROWS SERVER_ID
"""
import sys
import time

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import WriteRowsEvent

host, port, log_file, log_pos, wanted, server_id = sys.argv[1:7]
stream = BinLogStreamReader(
    connection_settings={"host": host, "port": int(port), "user": "root", "passwd": ""},
    server_id=int(server_id),
    log_file=log_file,
    log_pos=int(log_pos),
    resume_stream=True,
    # Blocking: it waits at the end of the log instead of starting over, and we
    # stop at the known row count.
    blocking=True,
    only_events=[WriteRowsEvent],
    is_mariadb=True,
)
rows = 0
started = time.monotonic()
cpu_started = time.process_time()
for event in stream:
    for row in event.rows:  # decodes every value
        rows += 1
    if rows >= int(wanted):
        break
seconds = time.monotonic() - started
cpu_seconds = time.process_time() - cpu_started
stream.close()
print(rows, seconds, cpu_seconds)
