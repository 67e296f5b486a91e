"""`python -m migrations_db [upgrade|downgrade] [revision]`."""

from migrations_db.db import main

main()
