from roles.storage.tasks import storage

storage()
