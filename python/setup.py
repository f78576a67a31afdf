"""Builds the chorus extension with CMake (the checkout this folder sits in) and packages it.

CHORUS_BUILD_DIR=DIR reuses an existing, configured build folder (fast: `ninja -C DIR _chorus`);
otherwise a Release build without CUDA is configured under build/ here. CHORUS_CMAKE_ARGS adds
CMake options (e.g. "-DCHORUS_CUDA=ON").
"""
import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("CHORUS_BUILD_DIR")
        if not build_dir:
            build_dir = os.path.join(HERE, "build", "cmake")
            args = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DCHORUS_TESTS=OFF",
                    "-DCHORUS_CUDA=OFF", "-DCHORUS_PYTHON=ON", f"-DPython_EXECUTABLE={sys.executable}"]
            if shutil.which("ninja"):
                args += ["-G", "Ninja"]
            args += shlex.split(os.environ.get("CHORUS_CMAKE_ARGS", ""))
            subprocess.check_call(args)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "_chorus", "--parallel"])
        built = glob.glob(os.path.join(build_dir, "python", "chorus", "_chorus*.so"))
        if not built:
            raise RuntimeError(f"no _chorus extension in {build_dir}/python/chorus after the build")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)


setup(ext_modules=[CMakeExtension("chorus._chorus")], cmdclass={"build_ext": CMakeBuild})
