"""pyinfra CLI entry: needs --data estate_secrets_dir=DIR (munge.key inside)."""
from roles.munge.tasks import munge

munge()
