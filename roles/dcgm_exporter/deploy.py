from roles.dcgm_exporter.tasks import dcgm_exporter

dcgm_exporter()
