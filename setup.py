from configparser import ConfigParser
import setuptools, shlex

cfg_file = ConfigParser(delimiters=['='])
cfg_file.read('settings.ini')
cfg = cfg_file['DEFAULT']

cfg_keys = 'version description keywords author author_email'.split()
expected = cfg_keys + "lib_name user branch license status min_python audience language".split()
for o in expected: assert o in cfg, "missing expected setting: {}".format(o)
setup_cfg = {o: cfg[o] for o in cfg_keys}

licenses = {
    'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License'),
    'mit': ('MIT License', 'OSI Approved :: MIT License'),
}
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive']
py_versions = '3.10 3.11 3.12'.split()

requirements = shlex.split(cfg.get('requirements', ''))
# every `NAME_requirements` setting is the extra NAME; `dev` (the tests) also takes every user extra but `local`
extras = {k[:-len('_requirements')]: shlex.split(v) for k, v in cfg.items() if k.endswith('_requirements') and v.strip()}
extras['dev'] = extras.get('dev', []) + [r for name, reqs in extras.items() if name not in ('dev', 'local') for r in reqs]
# `entry_points = GROUP:NAME=MODULE:ATTR ...`: plugins found by ragbench's registries (core.Registry)
plugins = {}
for ep in cfg.get('entry_points', '').split():
    group, _, entry = ep.partition(':')
    plugins.setdefault(group, []).append(entry)
min_python = cfg['min_python']
lic = licenses.get(cfg['license'].lower(), (cfg['license'], None))

setuptools.setup(
    name=cfg['lib_name'],
    license=lic[0],
    classifiers=[
        'Development Status :: ' + statuses[int(cfg['status'])],
        'Intended Audience :: ' + cfg['audience'].title(),
        'Natural Language :: ' + cfg['language'].title(),
    ] + ['Programming Language :: Python :: ' + o for o in py_versions[py_versions.index(min_python):]]
,
    url=cfg['git_url'],
    packages=setuptools.find_packages(include=['ragbench', 'ragbench.*']),
    include_package_data=True,
    package_data={'ragbench': ['data/*', 'data/**/*', 'notebooks/*.ipynb', 'notebooks/steps/*.ipynb']},
    # JupyterLab hands kernels CurveZMQ keys (no "Kernel is running over TCP without encryption" warning); `pip install -e`
    # places no data files: `python -m ragbench.jupyter` writes the same file (the README's JupyterLab command runs it)
    data_files=[('etc/jupyter/jupyter_server_config.d', ['jupyter-config/jupyter_server_config.d/ragbench.json'])],
    install_requires=requirements,
    extras_require=extras,
    dependency_links=cfg.get('dep_links', '').split(),
    python_requires='>=' + cfg['min_python'],
    long_description=open('README.md').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={
        'console_scripts': cfg['console_scripts'].split(),
        **plugins,
        'nbdev': [f'{cfg.get("lib_path")}={cfg.get("lib_path")}._modidx:d'],
    },
    **setup_cfg)
