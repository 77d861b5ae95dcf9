from roles.node_exporter.tasks import node_exporter

node_exporter()
