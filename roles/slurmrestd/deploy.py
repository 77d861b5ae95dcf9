from roles.slurmrestd.tasks import slurmrestd

slurmrestd()
