"""slurm_conf/reframe-settings.py.j2, compiled by estate.render.templates.write_compiled: do not edit."""
STAMP = ('061dec60952e3460851268bfb15878e211a0a9c7f337690a5ea114da951408c4', '3.1.6', 'undefined=StrictUndefined,keep_trailing_newline=True,trim_blocks=True,lstrip_blocks=True,autoescape=False,finalize=_finalize')
from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'slurm_conf/reframe-settings.py.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_cluster = resolve('cluster')
    l_0_source = resolve('source')
    l_0_config = resolve('config')
    pass
    yield "# ReFrame's site configuration for the Slurm cluster "
    yield str(environment.finalize(context, (undefined(name='cluster') if l_0_cluster is missing else l_0_cluster)))
    yield ', rendered by Estate from\n# '
    yield str(environment.finalize(context, (undefined(name='source') if l_0_source is missing else l_0_source)))
    yield "; do not edit on the node (estate render writes it again).\n#\n# One system (the cluster), one partition per Slurm partition (sbatch -p NAME, srun as the\n# launcher) and `login`: the login node itself (the local scheduler), where the checks that\n# need no shared filesystem drive srun, salloc and sbatch as a user would.\n# Estate's checks: /etc/estate/reframe/estate_checks.py (tags quick, shared-fs, driver).\nsite_configuration = "
    yield str(environment.finalize(context, (undefined(name='config') if l_0_config is missing else l_0_config)))
    yield '\n'

blocks = {}
debug_info = '1=15&2=17&8=19'
