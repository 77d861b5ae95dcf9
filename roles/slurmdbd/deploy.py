from roles.slurmdbd.tasks import slurmdbd

slurmdbd()
