from roles.slurm_exporter.tasks import slurm_exporter

slurm_exporter()
