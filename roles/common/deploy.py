"""pyinfra CLI entry: pyinfra INVENTORY roles/common/deploy.py --data estate_render_dir=DIR"""
from roles.common.tasks import common

common()
