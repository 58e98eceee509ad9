"""The core stage, imported by every other: errors (UserError, one line), bounds (every numeric flag's range), files
(atomic writes), lock (one writer), machine (where work ran), quiet and startup (other libraries silent, threads
set before torch loads), cli (argument parsing, exit statuses) and configfiles (YAML configs read strictly)."""
